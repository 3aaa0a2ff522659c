//! The `/robots.txt` variants.

use crate::scenario::Robots;
use crate::util::put;

/// Size past which the oversized robots.txt hides its last group (Google reads 500 KiB).
const OVERSIZED_HIDE_AT: usize = 512 * 1024;
const OVERSIZED_TOTAL: usize = 1024 * 1024;

/// Writes the body of a 200 robots.txt for a variant that has one.
pub(crate) fn render(robots: &Robots, base: &str, out: &mut Vec<u8>) {
    let standard = b"User-agent: *\nDisallow: /private/\n";
    match robots {
        Robots::Standard | Robots::Status(_) | Robots::Timeout(_) => {
            out.extend_from_slice(standard);
        }
        Robots::CrawlDelay(d) => {
            out.extend_from_slice(standard);
            put!(out, "Crawl-delay: {d}\n");
        }
        Robots::PerAgent(agent) => {
            put!(
                out,
                "# Groups per agent; a crawler follows the most specific group that matches it.\nUser-agent: *\nDisallow: /private/\n\nUser-agent: {agent}\nDisallow: /private/\nDisallow: /category/\nAllow: /category/travel/\nCrawl-delay: 1\n\nUser-agent: BadBot\nDisallow: /\n"
            );
        }
        Robots::Oversized => {
            out.extend_from_slice(standard);
            let mut i = 0u32;
            while out.len() < OVERSIZED_HIDE_AT {
                put!(out, "Allow: /catalogue/padding-{i}/\n");
                i += 1;
            }
            out.extend_from_slice(b"\nUser-agent: *\nDisallow: /catalogue/\n\n");
            while out.len() < OVERSIZED_TOTAL {
                put!(out, "# padding line {i}\n");
                i += 1;
            }
        }
        Robots::Custom(text) => {
            out.extend_from_slice(text.as_bytes());
            return;
        }
    }
    put!(out, "\nSitemap: {base}sitemap.xml\n");
}
