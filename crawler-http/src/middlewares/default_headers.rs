//! The default_headers middleware: headers every request gets unless it sets them.

use crawler_core::{Action, DownloaderMiddleware, Request, Result, parse_header_line};

use super::has_header;

/// Adds headers to every request that does not set them (`default_headers`).
#[derive(Debug, Clone)]
pub struct DefaultHeaders {
    headers: Vec<(String, String)>,
}

impl DefaultHeaders {
    /// From `(name, value)` pairs.
    pub fn new(headers: Vec<(String, String)>) -> Self {
        Self { headers }
    }

    /// From `Name: value` lines, as the setting writes them.
    pub fn from_lines(lines: &[String]) -> Result<Self> {
        let headers = lines
            .iter()
            .map(|l| {
                parse_header_line(l).ok_or_else(|| {
                    crawler_core::Error::new(
                        crawler_core::ErrorKind::Settings,
                        format!("default_headers entry '{l}' is not written `Name: value`"),
                    )
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self { headers })
    }
}

impl DownloaderMiddleware for DefaultHeaders {
    fn name(&self) -> &str {
        "default_headers"
    }

    async fn process_request(&self, request: &mut Request) -> Action {
        for (k, v) in &self.headers {
            if !has_header(request, k) {
                request.headers.push((k.clone(), v.clone()));
            }
        }
        Action::Continue
    }
}
