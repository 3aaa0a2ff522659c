//! `crawler new` and `crawler genspider`: project and spider templates.

use std::path::{Path, PathBuf};

use crawler::core::{SECTIONS, Settings, parse_http_url, section_of};

use crawler::{Error, ErrorKind};

/// Where this binary's framework sources live (the workspace it was built from).
/// The framework's directory (the workspace root, one above this crate), which a new
/// project depends on by path.
const FRAMEWORK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg.into())
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, text).map_err(|e| err(format!("cannot write {}: {e}", path.display())))
}

fn valid_package_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn valid_ident(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn camel(name: &str) -> String {
    name.split(['_', '-'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// crawler.toml with every section present and every setting commented out at its default,
/// generated from the settings themselves so the template never lists a stale key.
pub(super) fn settings_template() -> String {
    let defaults = defaults_for_template();
    let mut out = String::from(
        "# Settings of this crawler project. Every setting is shown at its default, commented\n\
         # out; uncomment to change. Precedence, lowest first: defaults < this file < the\n\
         # spider's custom_settings() < CRAWLER_<KEY> environment variables < -s key=value.\n\
         # `cargo run -- settings` prints every effective value and where it came from.\n\
         # Durations: \"500ms\", \"2s\", \"1m\". Reference: docs/settings.md in the framework.\n",
    );
    for section in SECTIONS {
        out.push_str(&format!("\n# {}\n[{}]\n", section.about, section.name));
        for (key, value) in &defaults {
            if key == "hosts" || section_of(key) != section.name {
                continue;
            }
            if key == "user_agent" {
                out.push_str("# Name your crawler and give site operators a way to reach you:\n");
                out.push_str("user_agent = \"PROJECT/0.1 (+https://example.com/contact)\"\n");
                continue;
            }
            out.push_str(&format!("# {key} = {value}\n"));
        }
    }
    out.push_str(
        "\n# Per-host rules, first match wins. Raise the budget only for hosts you own. A rule's\n\
         # rate is its ceiling and, unless it gives a start_rate, the rate the host starts at.\n\
         # This one is for the lab (`crawler lab`, the example spider's site): a server you own,\n\
         # so the crawl may go at full speed there. Other hosts get the polite defaults above.\n\
         [[hosts]]\nmatch = \"127.0.0.1:8080\"\nrate = 500\nconcurrency = 16\n\
         delay = \"0s\"\n\
         \n# This rule covers the lab's port only. To mark your own test server as fast too, give\n\
         # it a rule of its own, its host:port as `match` (a host without a port matches it on\n\
         # every port; `*` and `?` are wildcards: \"*.test\"), for example:\n\
         # [[hosts]]\n# match = \"127.0.0.1:3000\"\n# rate = 500\n# concurrency = 16\n\
         # delay = \"0s\"\n",
    );
    out
}

/// `(key, value as TOML)` of every default setting, for templates.
fn defaults_for_template() -> Vec<(String, String)> {
    {
        let Ok(serde_json::Value::Object(map)) = serde_json::to_value(Settings::default()) else {
            return Vec::new();
        };
        map.into_iter()
            .map(|(k, v)| {
                let text = match &v {
                    serde_json::Value::Null => "\"\"  # unset".to_owned(),
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect()
    }
}

const MAIN_RS: &str = r#"//! PROJECT: a crawler project. `cargo run -- list` shows the spiders,
//! `cargo run -- crawl books -o books.jsonl` runs one (`-a url=http://host/` gives the
//! spider an argument), `cargo run -- settings` shows the effective settings,
//! `cargo run -- check` runs the spiders' contract checks.

mod spiders;

use crawler_cli::{Contract, Runner};

// The allocator is the project's choice: mimalloc costs less CPU per page than the system
// allocator (the framework's BENCHMARKS.md, "Crawl speed"). Delete these two lines
// and the `tune_allocator` call in `main` for the system allocator.
#[global_allocator]
static GLOBAL: crawler::MiMalloc = crawler::MiMalloc;

fn main() -> std::process::ExitCode {
    // First, before the runtime's threads start: mimalloc returns freed memory to the OS
    // after 10 ms instead of 1 s (MIMALLOC_PURGE_DELAY in the environment overrides it).
    crawler::tune_allocator();
    run()
}

#[tokio::main]
async fn run() -> std::process::ExitCode {
    // A spider that needs pipelines or middlewares is registered with
    // `.spider_with(spider, |crawl| crawl.pipeline(...))`.
    Runner::new()
        .spider(spiders::books::Books::default())
        .contract(
            "books",
            // Relative: resolved against the spider's start URL (`check -a url=...`).
            Contract::url("catalogue/book-1.html")
                .callback("book")
                .returns_items(1, 1)
                .scrapes(["title", "price"]),
        )
        .run_cli()
        .await
}
"#;

/// The example spider of a new project: the framework's own basic example.
const BOOKS_RS: &str = include_str!("../../examples/books/spider.rs");

const README_MD: &str = r#"# PROJECT

A crawler project built on the `crawler` framework.

```sh
crawler lab &                                  # the local book site on 127.0.0.1:8080
cargo run -- list                              # the spiders
cargo run -- check                             # their contract checks
cargo run -- crawl books -o books.jsonl        # crawl, items to books.jsonl
cargo run -- settings                          # effective settings and where they came from
```

The lab is your own server: the `[[hosts]]` rule at the end of `crawler.toml` lets the crawl
go at full speed there (a second or two for its 1,000 books). Every other host gets the polite
defaults; to give a test server of yours the same speed, add a `[[hosts]]` rule with its
host:port (the comment under the lab's rule shows one). Point the spider elsewhere with a
spider argument:
`cargo run -- crawl books -a url=http://host/` (and `cargo run -- check -a url=http://host/`).

- Settings live in `crawler.toml` (every section is there, commented); set `user_agent` first.
- Add a spider with `crawler genspider NAME URL`, then register it in `src/main.rs`.
- Logs: `-L debug`, `--log-format json`; a live display on a terminal, log lines otherwise.
"#;

const GITIGNORE: &str = "/target\n*.jsonl\n*.csv\n/jobs/\n";

/// Create the project `name` in the current directory.
pub(super) fn new_project(name: &str, framework: Option<PathBuf>) -> Result<(), Error> {
    if !valid_package_name(name) {
        return Err(err(format!(
            "'{name}' is not a valid package name (letters, digits, '_' and '-', starting with a letter)"
        )));
    }
    let dir = PathBuf::from(name);
    if dir.exists() {
        return Err(err(format!("{} already exists", dir.display())));
    }
    let framework = framework.unwrap_or_else(|| PathBuf::from(FRAMEWORK_DIR));
    let framework = framework.canonicalize().map_err(|e| {
        err(format!(
            "the framework path {} is not usable ({e}); pass --path DIR",
            framework.display()
        ))
    })?;
    if !framework.join("Cargo.toml").is_file() {
        return Err(err(format!(
            "{} has no Cargo.toml; pass --path DIR (the crawler framework's directory)",
            framework.display()
        )));
    }
    let dep_path = framework.to_string_lossy().replace('\\', "/");
    let cargo = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
# The framework, with job directories that resume (`--job-dir`, `sled`) and mimalloc. Its
# `redis` feature (a fleet on Redis: `redis_url`) and `browser` (pages built by JavaScript)
# are off, so the project compiles less; add them to the list when the project needs them.
crawler = {{ path = "{dep_path}", default-features = false, features = ["mimalloc", "sled"] }}
# The project's command line (`cargo run -- crawl NAME`). Add `features = ["metrics"]` for
# the Prometheus endpoint (`metrics_addr`).
crawler-cli = {{ path = "{dep_path}/crawler-cli", default-features = false }}
# The derive macros expand to `serde::...` paths, so the project names serde itself.
serde = {{ version = "1", features = ["derive"] }}
tokio = {{ version = "1", features = ["rt-multi-thread", "macros"] }}

# A project of its own, even when created inside another workspace.
[workspace]

# Debug builds: line tables for the project's own code (panics and backtraces still name
# files and lines), no debug info and no optimisation for dependencies. The first build is
# then well under half of what full debug info and optimised dependencies cost (the
# framework's BENCHMARKS.md, "A new project's cold build"); a debug build still parses
# hundreds of pages a second, and `cargo run --release` is there for long crawls.
[profile.dev]
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false

# Release builds as the framework's benchmarks are built: whole-program optimisation lets
# the HTML parser and the crawler inline into one another (about a tenth less CPU per page,
# a smaller binary and peak RSS), for a longer build.
[profile.release]
lto = "fat"
codegen-units = 1
"#
    );
    let project = |t: &str| t.replace("PROJECT", name);
    write(&dir.join("Cargo.toml"), &cargo)?;
    write(&dir.join("crawler.toml"), &project(&settings_template()))?;
    write(&dir.join("src/main.rs"), &project(MAIN_RS))?;
    write(
        &dir.join("src/spiders/mod.rs"),
        "//! The project's spiders.\n\npub mod books;\n",
    )?;
    write(&dir.join("src/spiders/books.rs"), BOOKS_RS)?;
    write(&dir.join("README.md"), &project(README_MD))?;
    write(&dir.join(".gitignore"), GITIGNORE)?;
    // The framework's lock file pins the versions it is tested with and lets the first build
    // work offline; cargo adds the new package to it.
    let lock = framework.join("Cargo.lock");
    if lock.is_file() {
        std::fs::copy(&lock, dir.join("Cargo.lock"))
            .map_err(|e| err(format!("cannot copy {}: {e}", lock.display())))?;
    }
    println!("created project {name} in {}", dir.display());
    println!("  cd {name}");
    println!("  crawler lab &            # the example spider's site, on 127.0.0.1:8080");
    println!("  cargo run -- crawl books -o books.jsonl");
    Ok(())
}

/// Add `src/spiders/NAME.rs` to the project around the current directory.
pub(super) fn genspider(name: &str, url: &str) -> Result<(), Error> {
    if !valid_ident(name) {
        return Err(err(format!(
            "'{name}' is not a valid spider name (lower case letters, digits and '_')"
        )));
    }
    let start = parse_http_url(url)?;
    let cwd = std::env::current_dir().map_err(|e| err(format!("no current directory: {e}")))?;
    let root = cwd
        .ancestors()
        .take(64)
        .find(|d| d.join("Cargo.toml").is_file())
        .ok_or_else(|| err("not inside a project (no Cargo.toml here or above)"))?;
    let spiders = root.join("src/spiders");
    let file = spiders.join(format!("{name}.rs"));
    if file.exists() {
        return Err(err(format!("{} already exists", file.display())));
    }
    let text = spider_template(name, &start);
    write(&file, &text)?;
    let module = spiders.join("mod.rs");
    let registered = if module.is_file() {
        let mut current = std::fs::read_to_string(&module)
            .map_err(|e| err(format!("cannot read {}: {e}", module.display())))?;
        let line = format!("pub mod {name};");
        if !current.lines().any(|l| l.trim() == line) {
            if !current.ends_with('\n') && !current.is_empty() {
                current.push('\n');
            }
            current.push_str(&line);
            current.push('\n');
            write(&module, &current)?;
        }
        true
    } else {
        false
    };
    println!("created {}", file.display());
    if !registered {
        println!("add `pub mod {name};` to src/spiders/mod.rs");
    }
    let ty = camel(name);
    println!("register it in src/main.rs:  .spider(spiders::{name}::{ty})");
    Ok(())
}

/// The source of a new spider `name` that starts at `start`: it scrapes each page's title
/// and follows the site's "next page" links to the end.
fn spider_template(name: &str, start: &crawler::Url) -> String {
    let ty = camel(name);
    let domain = start.host_str().unwrap_or_default();
    format!(
        r#"//! The `{name}` spider.

use crawler::prelude::*;

/// What `{name}` scrapes from a page.
#[derive(Debug, Serialize)]
pub struct {ty}Item {{
    /// The page.
    pub url: String,
    /// Its title.
    pub title: String,
}}

/// Crawls {start} and the pages after it.
pub struct {ty};

impl Spider for {ty} {{
    type Item = {ty}Item;

    fn name(&self) -> &str {{
        "{name}"
    }}

    fn start_urls(&self) -> Vec<String> {{
        vec!["{start}".into()]
    }}

    fn allowed_domains(&self) -> Vec<String> {{
        vec!["{domain}".into()]
    }}

    async fn parse(&self, page: Response, out: &mut Output<{ty}Item>) -> Result<()> {{
        out.item({ty}Item {{
            url: page.url().to_string(),
            title: page.text_of("title").unwrap_or_default(),
        }});
        // The next page of a listing, followed to the end of the chain (each page is one
        // link deeper than the one before, so a `depth_limit` would cut it short). To
        // follow the pages a listing links to as well:
        //     out.follow_all(page.select("h3 a").attrs("href")).callback("detail");
        // with a `match page.callback()` in this function for "detail".
        if let Some(next) = page.select("a[rel=next], li.next a, a.next").attr("href") {{
            out.follow(next);
        }}
        Ok(())
    }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_is_valid_toml_that_loads_with_every_section() {
        let text = settings_template().replace("PROJECT", "demo");
        let mut layers = crawler::settings::SettingsLayers::new();
        layers.file_text("crawler.toml", &text).unwrap();
        let s = layers.resolve(None).unwrap().settings;
        assert_eq!(s.user_agent, "demo/0.1 (+https://example.com/contact)");
        // The lab is a server the project owns: full speed from the first request there,
        // the polite defaults everywhere else.
        let lab = s.for_host("127.0.0.1:8080");
        assert_eq!((lab.max_rate, lab.start_rate), (500.0, 500.0));
        assert_eq!(lab.concurrency_per_host, 16);
        let other = s.for_host("books.example");
        assert_eq!(other.start_rate, Settings::default().start_rate);
        for section in SECTIONS {
            assert!(
                text.contains(&format!("[{}]", section.name)),
                "{}",
                section.name
            );
        }
        // Uncommenting every default must still load: the template shows valid values. The
        // example rule for a test server of one's own, uncommented, is a rule that applies.
        let uncommented: String = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest)
                    if (rest.contains(" = ") && !rest.contains("# unset"))
                        || rest == "[[hosts]]" =>
                {
                    rest.to_owned()
                }
                _ => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let mut layers = crawler::settings::SettingsLayers::new();
        layers.file_text("crawler.toml", &uncommented).unwrap();
        let s = layers.resolve(None).unwrap().settings;
        assert_eq!(s.hosts.len(), 2, "{uncommented}");
        let own = s.for_host("127.0.0.1:3000");
        assert_eq!((own.max_rate, own.concurrency_per_host), (500.0, 16));
        assert_eq!(
            s.for_host("127.0.0.1:3001").max_rate,
            Settings::default().max_rate
        );
    }

    /// A generated spider follows a listing's "next page" chain to its end: no depth limit
    /// (the lab catalogue's 50 pages are crawled to the last by crawler-cli's
    /// `new_project_builds_and_its_spider_crawls_the_lab`).
    #[test]
    fn a_generated_spider_follows_next_pages_without_a_depth_limit() {
        let start = parse_http_url("http://quotes.test:8081/page/1/").unwrap();
        let text = spider_template("quotes", &start);
        assert!(!text.contains("depth_limit\","), "{text}");
        assert!(!text.contains("custom_settings"), "{text}");
        assert!(text.contains("li.next a"), "{text}");
        assert!(text.contains("out.follow(next);"), "{text}");
        assert!(text.contains("vec![\"http://quotes.test:8081/page/1/\".into()]"));
        assert!(text.contains("vec![\"quotes.test\".into()]"));
    }

    #[test]
    fn names() {
        assert_eq!(camel("book_shop"), "BookShop");
        assert!(valid_ident("quotes2") && !valid_ident("2quotes") && !valid_ident("Quotes"));
        assert!(valid_package_name("demo-1") && !valid_package_name("-demo"));
    }
}
