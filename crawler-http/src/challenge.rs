//! Challenge-page detection: does a body contain one of the `soft_block_markers`, ASCII
//! case-insensitively?
//!
//! This runs on every response, before any spider code, so it must cost a fraction of the
//! parse. A case-insensitive Aho-Corasick automaton alone cannot use its SIMD prefilter
//! (aho-corasick turns the packed searcher off under `ascii_case_insensitive`) and walks
//! every byte through its DFA. Instead, a packed (Teddy) searcher looks for every ASCII case
//! variant of each marker's first few bytes, which ordinary pages almost never contain, and
//! only those candidates are checked against the whole marker by the automaton, anchored.

use aho_corasick::{AhoCorasick, Anchored, Input, StartKind, packed};

use crate::error::Error;

/// Longest marker prefix the SIMD scan looks for.
const MAX_PREFIX: usize = 4;
/// Most patterns the packed searcher takes before it refuses to build.
const MAX_VARIANTS: usize = 64;

/// The markers, compiled once per downloader.
#[derive(Debug, Clone)]
pub(crate) struct ChallengeMatcher {
    /// Every case variant of each marker's first bytes (`None`: too many variants, or no
    /// SIMD on this CPU; the automaton then scans alone).
    prefixes: Option<packed::Searcher>,
    /// All markers, case-insensitive; anchored at a candidate when `prefixes` is set.
    markers: AhoCorasick,
}

impl ChallengeMatcher {
    /// A matcher for the non-empty `markers`, or `None` when there are none.
    pub(crate) fn new(markers: &[String]) -> Result<Option<Self>, Error> {
        let markers: Vec<&[u8]> = markers
            .iter()
            .map(|m| m.as_bytes())
            .filter(|m| !m.is_empty())
            .collect();
        if markers.is_empty() {
            return Ok(None);
        }
        let prefixes = (1..=MAX_PREFIX)
            .rev()
            .find_map(|len| prefix_searcher(&markers, len));
        let markers = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .start_kind(StartKind::Both)
            .build(&markers)
            .map_err(|e| Error::new("cannot build the soft_block_markers matcher", e))?;
        Ok(Some(Self { prefixes, markers }))
    }

    /// Whether `hay` contains a marker, ignoring ASCII case.
    pub(crate) fn is_match(&self, hay: &[u8]) -> bool {
        let Some(prefixes) = &self.prefixes else {
            return self.markers.is_match(hay);
        };
        let mut at = 0;
        while let Some(candidate) = prefixes.find_in(hay, aho_corasick::Span::from(at..hay.len())) {
            let start = candidate.start();
            let input = Input::new(hay).range(start..).anchored(Anchored::Yes);
            if self.markers.is_match(input) {
                return true;
            }
            // One byte on, not past the candidate: another marker's prefix may overlap it.
            at = start + 1;
        }
        false
    }
}

/// A packed searcher for every ASCII case variant of the first `len` bytes of each marker,
/// if they fit.
fn prefix_searcher(markers: &[&[u8]], len: usize) -> Option<packed::Searcher> {
    let mut variants: Vec<Vec<u8>> = Vec::new();
    for m in markers {
        let prefix = &m[..len.min(m.len())];
        let mut these = vec![Vec::with_capacity(prefix.len())];
        for &b in prefix {
            let cases: &[u8] = if b.is_ascii_alphabetic() {
                &[b.to_ascii_lowercase(), b.to_ascii_uppercase()]
            } else {
                std::slice::from_ref(&b)
            };
            these = these
                .into_iter()
                .flat_map(|v| {
                    cases.iter().map(move |&c| {
                        let mut v = v.clone();
                        v.push(c);
                        v
                    })
                })
                .collect();
            if these.len() > MAX_VARIANTS {
                return None;
            }
        }
        variants.extend(these);
        if variants.len() > MAX_VARIANTS {
            return None;
        }
    }
    variants.sort();
    variants.dedup();
    packed::Config::new()
        .match_kind(packed::MatchKind::LeftmostFirst)
        .builder()
        .extend(&variants)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> ChallengeMatcher {
        let markers: Vec<String> = crawler_core::Settings::default().soft_block_markers;
        ChallengeMatcher::new(&markers)
            .expect("builds")
            .expect("markers")
    }

    /// The reference: lowercase both and look for each marker.
    fn naive(markers: &[String], hay: &[u8]) -> bool {
        let hay = hay.to_ascii_lowercase();
        markers.iter().filter(|m| !m.is_empty()).any(|m| {
            let m = m.as_bytes().to_ascii_lowercase();
            hay.windows(m.len()).any(|w| w == m.as_slice())
        })
    }

    #[test]
    fn finds_markers_in_any_case_anywhere() {
        let m = defaults();
        assert!(
            m.prefixes.is_some(),
            "the default markers fit the SIMD scan"
        );
        let page = "<html><head><title>Just A Moment...</title></head></html>";
        assert!(m.is_match(page.as_bytes()));
        let long = format!(
            "{}<p>Our systems detected UNUSUAL traffic</p>",
            "x".repeat(5000)
        );
        assert!(m.is_match(long.as_bytes()));
        assert!(m.is_match(b"<script src=\"/CDN-CGI/challenge-platform/h/b\">"));
        assert!(!m.is_match(b"<p>Just a minute, are you a reader? Unusual books.</p>"));
        assert!(!m.is_match(b""));
    }

    #[test]
    fn overlapping_prefixes_are_not_skipped() {
        // "are you a robot" starts inside a near miss of another candidate.
        let markers = vec!["aaab".to_owned(), "aab".to_owned()];
        let m = ChallengeMatcher::new(&markers)
            .expect("builds")
            .expect("some");
        assert!(m.is_match(b"xaaab"));
        assert!(m.is_match(b"AAAAB"));
        assert!(!m.is_match(b"aaaa"));
    }

    #[test]
    fn agrees_with_the_naive_search() {
        let sets: Vec<Vec<String>> = vec![
            crawler_core::Settings::default().soft_block_markers,
            vec!["ab".into(), "b-c".into(), "".into()],
            // Too many variants for the SIMD scan: the automaton alone.
            (0..20).map(|i| format!("marker{i}word")).collect(),
        ];
        let words = [
            "just",
            "a",
            "moment",
            "...",
            "unusual",
            "traffic",
            "cf-",
            "challenge",
            "ARE",
            "You",
            "robot",
            "/cdn-cgi/",
            "platform/",
            "ab",
            "b-C",
            "marker7",
            "WORD",
            " ",
            "<p>",
            "é",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for set in &sets {
            let m = ChallengeMatcher::new(set).expect("builds").expect("some");
            for _ in 0..2000 {
                let mut hay = String::new();
                for _ in 0..12 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    hay.push_str(words[(seed % words.len() as u64) as usize]);
                    if seed & 0x100 != 0 {
                        hay.push(' ');
                    }
                }
                assert_eq!(
                    m.is_match(hay.as_bytes()),
                    naive(set, hay.as_bytes()),
                    "{set:?} on {hay:?}"
                );
            }
        }
    }
}
