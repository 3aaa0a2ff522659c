//! What one line typed at the shell means, and how results are cut to a readable size. Pure
//! functions: no network and no terminal, so every rule here is unit-tested.

use std::fmt::Write as _;

/// What a query asks of each node it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pick {
    /// The node's text, whitespace collapsed: all the text below an element, a text node's
    /// or attribute's own (`SEL::text`, `SEL::attr(NAME)`, `//a/@href` select those).
    Text,
    /// An attribute's value (`SEL::attr(NAME)`, `attr NAME SEL`); elements without it are
    /// skipped.
    Attr(String),
    /// The element's outer HTML (`html SEL`).
    Html,
    /// Only how many elements match (`count SEL`).
    Count,
}

/// A CSS selector or XPath expression with what to print of its matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    /// The selector or expression itself, checked to parse.
    pub expr: String,
    /// Whether `expr` is XPath (typed after `xpath`, or reading as XPath: `//h1`).
    pub xpath: bool,
    /// What to print of each match.
    pub pick: Pick,
}

/// One shell command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// Nothing to do (a blank line or a `#` comment).
    Nothing,
    /// Print what a selector selects.
    Select(Query),
    /// List the page's links (`a[href]`), or the `href`s of a query's matches.
    Links(Option<Query>),
    /// Fetch a link of the page: an href (resolved against the page) or the index of an
    /// entry of the last list printed.
    Follow(String),
    /// Fetch a URL (absolute, or relative to the page).
    Fetch(String),
    /// Print the status line and the response headers.
    Headers,
    /// Print the status code.
    Status,
    /// Print the page's final URL.
    Url,
    /// Print the body as text.
    Body,
    /// Save the body to a file and print its path.
    View,
    /// Print the commands.
    Help,
    /// End the session.
    Quit,
}

/// The commands, for `help`.
pub(crate) const HELP: &str = "\
SELECTOR              text of each element a CSS selector matches (also `css SELECTOR`)
SELECTOR::text        each match's own text nodes, as in spider code and Scrapy
SELECTOR::attr(NAME)  attribute NAME of each match (also `attr NAME SELECTOR`)
//XPATH               what an XPath gives: //h1/text(), //a/@href (also `xpath EXPR`)
html SELECTOR         outer HTML of each match (CSS or XPath, as everywhere below)
count SELECTOR        how many nodes match
links [SELECTOR]      the page's links (a[href]), or the hrefs of SELECTOR's matches, absolute
follow N|HREF         fetch entry N of the last list printed, or a link (relative or absolute)
fetch URL             fetch another URL (robots.txt checked)
status | url          the page's status code | its final URL
headers               status line and response headers
body                  the body as text
view                  save the body to a file and print its path
help | quit           this list | leave (also Ctrl-D)
Lists are numbered from 0; `follow 3` fetches entry 3. Output is cut at --max-matches
entries of --max-chars characters each.";

/// Parse one line. Command words are matched first, case-insensitively; anything else is a
/// selector (write `css body` to select an element whose name is a command word).
pub(crate) fn parse(line: &str) -> Result<Command, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(Command::Nothing);
    }
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (line, ""),
    };
    let needs = |what: &str| -> Result<String, String> {
        if rest.is_empty() {
            Err(format!("`{word}` needs {what} (see `help`)"))
        } else {
            Ok(rest.to_owned())
        }
    };
    let bare = |cmd: Command| -> Result<Command, String> {
        if rest.is_empty() {
            Ok(cmd)
        } else {
            Err(format!(
                "`{word}` takes no argument (to select elements named `{word}`, write \
                 `css {line}`)"
            ))
        }
    };
    match word.to_ascii_lowercase().as_str() {
        "css" => query(&needs("a selector")?, Some(false), Pick::Text).map(Command::Select),
        "xpath" => {
            query(&needs("an XPath expression")?, Some(true), Pick::Text).map(Command::Select)
        }
        "html" => query(&needs("a selector")?, None, Pick::Html).map(Command::Select),
        "count" => query(&needs("a selector")?, None, Pick::Count).map(Command::Select),
        "attr" => {
            let args = needs("an attribute name and a selector")?;
            let Some((name, css)) = args.split_once(char::is_whitespace) else {
                return Err("`attr` needs an attribute name and a selector, e.g. \
                            `attr href a.next`"
                    .to_owned());
            };
            query(css, None, Pick::Attr(name.to_owned())).map(Command::Select)
        }
        "links" if rest.is_empty() => Ok(Command::Links(None)),
        "links" => Ok(Command::Links(Some(query(
            rest,
            None,
            Pick::Attr("href".into()),
        )?))),
        "follow" => Ok(Command::Follow(needs("an entry number or a link")?)),
        "fetch" => Ok(Command::Fetch(needs("a URL")?)),
        "headers" => bare(Command::Headers),
        "status" => bare(Command::Status),
        "url" => bare(Command::Url),
        "body" => bare(Command::Body),
        "view" => bare(Command::View),
        "help" | "?" => Ok(Command::Help),
        "quit" | "exit" => bare(Command::Quit),
        _ => query(line, None, Pick::Text).map(Command::Select),
    }
}

/// A query of `input`: XPath when `xpath` says so, or when unsaid and the input reads as
/// XPath; checked to parse, with the selector engine's error (expression and position).
pub(crate) fn query(input: &str, xpath: Option<bool>, pick: Pick) -> Result<Query, String> {
    let expr = input.trim();
    let xpath = xpath.unwrap_or_else(|| crawler::core::looks_like_xpath(expr));
    let checked = if xpath {
        crawler::core::check_xpath(expr)
    } else {
        crawler::core::check_css(expr)
    };
    checked.map_err(|e| e.to_string())?;
    Ok(Query {
        expr: expr.to_owned(),
        xpath,
        pick,
    })
}

/// How much of a result is printed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Most entries printed per command (0: all).
    pub max_matches: usize,
    /// Most characters printed per entry (0: all).
    pub max_chars: usize,
    /// Prefix each entry with `[N] `, the index `follow N` takes.
    pub numbered: bool,
}

/// `text` cut to `max` characters (0: no cut), saying how many were left out.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if max == 0 {
        return text.to_owned();
    }
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((at, _)) => {
            let left = text[at..].chars().count();
            format!("{}… ({left} more characters)", &text[..at])
        }
    }
}

/// How many entries of a list of `total` are printed.
pub(crate) fn shown(total: usize, limits: Limits) -> usize {
    match limits.max_matches {
        0 => total,
        n => n.min(total),
    }
}

/// The lines printed for a list of `total` results of which `entries` are the first (at
/// least [`shown`] of them): numbered or not, each cut, then a `… N more` line for the rest.
pub(crate) fn render(entries: &[String], total: usize, limits: Limits) -> String {
    let shown = shown(total, limits).min(entries.len());
    let mut out = String::new();
    for (i, entry) in entries.iter().take(shown).enumerate() {
        if limits.numbered {
            let _ = write!(out, "[{i}] ");
        }
        out.push_str(&truncate(entry, limits.max_chars));
        out.push('\n');
    }
    if shown < total {
        let _ = writeln!(
            out,
            "… {} more (raise --max-matches to see them)",
            total - shown
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(css: &str, pick: Pick) -> Command {
        Command::Select(Query {
            expr: css.to_owned(),
            xpath: false,
            pick,
        })
    }

    fn xpath(expr: &str, pick: Pick) -> Command {
        Command::Select(Query {
            expr: expr.to_owned(),
            xpath: true,
            pick,
        })
    }

    #[test]
    fn selectors_and_their_pseudo_elements() {
        assert_eq!(
            parse("div.product h1"),
            Ok(select("div.product h1", Pick::Text))
        );
        assert_eq!(parse("css  h1 "), Ok(select("h1", Pick::Text)));
        // Pseudo-elements go to the selector engine as they are, as in spider code.
        assert_eq!(parse("h1::text"), Ok(select("h1::text", Pick::Text)));
        assert_eq!(
            parse("li.next a::attr(href)"),
            Ok(select("li.next a::attr(href)", Pick::Text))
        );
        // XPath by its look, or by its command word.
        assert_eq!(parse("//a/@href"), Ok(xpath("//a/@href", Pick::Text)));
        assert_eq!(
            parse("xpath count(//li)"),
            Ok(xpath("count(//li)", Pick::Text))
        );
        assert_eq!(parse("html //h1"), Ok(xpath("//h1", Pick::Html)));
        assert_eq!(
            parse("attr title article h3 a"),
            Ok(select("article h3 a", Pick::Attr("title".into())))
        );
        assert_eq!(parse("html p.price"), Ok(select("p.price", Pick::Html)));
        assert_eq!(parse("COUNT article"), Ok(select("article", Pick::Count)));
        // A command word as a selector needs `css`.
        assert_eq!(parse("css body"), Ok(select("body", Pick::Text)));
        assert_eq!(parse("body"), Ok(Command::Body));
    }

    #[test]
    fn commands_and_their_arguments() {
        assert_eq!(parse("  "), Ok(Command::Nothing));
        assert_eq!(parse("# a note"), Ok(Command::Nothing));
        assert_eq!(parse("follow 3"), Ok(Command::Follow("3".into())));
        assert_eq!(
            parse("follow ../x.html"),
            Ok(Command::Follow("../x.html".into()))
        );
        assert_eq!(
            parse("fetch http://127.0.0.1/"),
            Ok(Command::Fetch("http://127.0.0.1/".into()))
        );
        assert_eq!(parse("links"), Ok(Command::Links(None)));
        assert_eq!(
            parse("links li.next a"),
            Ok(Command::Links(Some(Query {
                expr: "li.next a".into(),
                xpath: false,
                pick: Pick::Attr("href".into()),
            })))
        );
        assert_eq!(parse("Status"), Ok(Command::Status));
        assert_eq!(parse("exit"), Ok(Command::Quit));
        assert_eq!(parse("?"), Ok(Command::Help));
    }

    #[test]
    fn mistakes_get_named_errors() {
        let e = parse("h1[").unwrap_err();
        assert!(
            e.starts_with("invalid CSS selector 'h1[' at position 4"),
            "{e}"
        );
        let e = parse("a::attr()").unwrap_err();
        assert!(e.contains("needs an attribute name"), "{e}");
        let e = parse("xpath //a[").unwrap_err();
        assert!(e.starts_with("invalid XPath '//a[' at position"), "{e}");
        let e = parse("css //a").unwrap_err();
        assert!(e.contains("this is XPath"), "{e}");
        let e = parse("follow").unwrap_err();
        assert!(e.contains("`follow` needs"), "{e}");
        let e = parse("attr href").unwrap_err();
        assert!(e.contains("attribute name and a selector"), "{e}");
        let e = parse("status 2").unwrap_err();
        assert!(e.contains("css status 2"), "{e}");
        assert!(parse("html").is_err());
    }

    #[test]
    fn output_is_cut_to_the_limits() {
        assert_eq!(truncate("héllo", 0), "héllo");
        assert_eq!(truncate("héllo", 5), "héllo");
        assert_eq!(truncate("héllo world", 5), "héllo… (6 more characters)");
        let entries: Vec<String> = (0..5).map(|i| format!("e{i}")).collect();
        let limits = Limits {
            max_matches: 2,
            max_chars: 0,
            numbered: true,
        };
        assert_eq!(
            render(&entries, 5, limits),
            "[0] e0\n[1] e1\n… 3 more (raise --max-matches to see them)\n"
        );
        let plain = Limits {
            max_matches: 0,
            numbered: false,
            ..limits
        };
        assert_eq!(render(&entries, 5, plain), "e0\ne1\ne2\ne3\ne4\n");
        // Only the entries shown need computing; the total still counts the rest.
        assert_eq!(
            render(&entries[..2], 7, limits),
            "[0] e0\n[1] e1\n… 5 more (raise --max-matches to see them)\n"
        );
    }
}
