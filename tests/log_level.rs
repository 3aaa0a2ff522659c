//! `log_level` given as a setting is honoured by a program that set up logging first
//! (`crawler::init_logging()` at the top of `main`, before any settings are read): the crawl
//! applies it when it runs (issue 34). One test in this file: logging is process-wide.

use crawler::prelude::*;
use crawler_lab::Lab;

struct One {
    start: String,
}

impl Spider for One {
    type Item = String;
    fn name(&self) -> &str {
        "one"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, _page: Response, _out: &mut Output<String>) -> Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_level_setting_refilters_the_logging_main_set_up() {
    // SAFETY of the test's premise: RUST_LOG would set the level without the setting.
    assert!(
        std::env::var_os("RUST_LOG").is_none(),
        "run without RUST_LOG"
    );
    crawler::init_logging();
    let debug_on = || tracing::enabled!(target: "crawler_core", tracing::Level::DEBUG);
    assert!(!debug_on(), "info by default");
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    Crawl::new(One { start: lab.url() })
        .set("log_level", "debug")
        .set("obey_robots", "false")
        .set("depth_limit", "1")
        .progress(false)
        .run()
        .await
        .expect("crawl runs");
    assert!(
        debug_on(),
        "the crawl's log_level applies to the running program"
    );
    // Other crates stay at warn under a plain level.
    assert!(!tracing::enabled!(target: "html5ever", tracing::Level::INFO));
    lab.shutdown().await;
}
