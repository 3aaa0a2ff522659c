//! The user_agent middleware: the crawl's User-Agent as an explicit header.

use crawler_core::{Action, DownloaderMiddleware, Request};

use super::has_header;

/// Sends the crawl's User-Agent (`user_agent`, which a spider overrides with
/// `custom_settings`) as an explicit header, unless a request sets its own.
///
/// The HTTP client already sends `user_agent`; the header makes it visible to the
/// middlewares after this one, and lets one request (a request's own `User-Agent`) differ.
#[derive(Debug, Clone)]
pub struct UserAgent {
    agent: String,
}

impl UserAgent {
    /// A middleware sending `agent`.
    pub fn new(agent: &str) -> Self {
        Self {
            agent: agent.to_owned(),
        }
    }
}

impl DownloaderMiddleware for UserAgent {
    fn name(&self) -> &str {
        "user_agent"
    }

    async fn process_request(&self, request: &mut Request) -> Action {
        if !has_header(request, "user-agent") {
            request
                .headers
                .push(("User-Agent".to_owned(), self.agent.clone()));
        }
        Action::Continue
    }
}
