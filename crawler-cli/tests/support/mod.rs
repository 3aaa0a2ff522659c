//! What the command-line tests share: the `crawler` binary run in a directory with none of
//! the developer's own variables, a project directory, and output as text.

use std::path::Path;
use std::process::{Command, Output};

/// The `crawler` binary of this package.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_crawler");

/// `cmd` in `dir`, with none of the developer's own logging, colour, settings, Scrapy or
/// proxy variables: they must not leak into the checks.
pub(crate) fn clean(mut cmd: Command, dir: &Path) -> Command {
    cmd.current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("CRAWLER_SETTINGS");
    for (k, _) in std::env::vars() {
        if k.starts_with("CRAWLER_")
            || k.starts_with("SCRAPY_")
            || crawler::http::PROXY_ENV_VARS.contains(&k.as_str())
        {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// The `crawler` binary with `args`, in `dir`.
pub(crate) fn crawler(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    clean(cmd, dir)
}

/// Run a command on a blocking thread (the lab is served by the test's runtime).
pub(crate) async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("command runs"))
        .await
        .expect("command thread")
}

/// Bytes of a command's output as text.
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A directory that looks like a project: Cargo.toml, this crawler.toml and `src/`.
pub(crate) fn project(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"p\"\nversion = \"0.1.0\"\n",
    )
    .expect("write Cargo.toml");
    std::fs::write(dir.path().join("crawler.toml"), toml).expect("write crawler.toml");
    std::fs::create_dir(dir.path().join("src")).expect("mkdir src");
    dir
}
