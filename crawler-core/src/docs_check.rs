//! docs/retries.md against crawler-core, for what its prose states beyond the tables: the
//! terminal states and stats it names, the example skip message's `max_retry_after`, the
//! address policy's default and ranges. The tables, the retried statuses and the backoff
//! ceilings are read by crawler-engine's `engine/retry.rs` `doc_tests`; the politeness machine's constants
//! (crawler-sched's `Tuning`, which this crate cannot see) by the facade's `tests/retries.rs`.
//!
//! Each check finds the phrase that states a figure and compares what follows it with the
//! code's value, so a change on either side fails with a message naming both.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::Settings;
use crate::Stats;
use crate::address::{AddressClass, classify, is_metadata_host};

const DOC: &str = "docs/retries.md";
const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/retries.md");

/// The page with every run of whitespace made one space, so a phrase is found wherever the
/// text wraps.
fn doc() -> String {
    let text = std::fs::read_to_string(PATH).unwrap_or_else(|e| panic!("{PATH}: {e}"));
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What the page says between `before` and the next `end`.
fn stated<'a>(doc: &'a str, before: &str, end: char) -> &'a str {
    let start = doc
        .find(before)
        .unwrap_or_else(|| panic!("{DOC} no longer says `{before}`"))
        + before.len();
    let rest = &doc[start..];
    rest.find(end).map_or(rest, |i| &rest[..i])
}

#[test]
fn the_terminal_states_and_stats_it_names_are_the_stats() {
    let doc = doc();
    let stats = serde_json::to_value(Stats::default()).expect("the stats serialise");
    let list = stated(&doc, "ends in exactly one terminal state (", ')');
    let names: Vec<&str> = list
        .split(',')
        .map(|n| n.trim().trim_matches('`'))
        .map(|n| n.split_once(':').map_or(n, |(head, _)| head))
        .collect();
    assert_eq!(
        names.len(),
        7,
        "{DOC} lists the terminal states as `{list}`"
    );
    for name in names {
        assert!(
            stats.get(name).is_some(),
            "{DOC} names the terminal state `{name}`, which Stats does not count"
        );
    }
    let retries = stated(&doc, "(it counts in the `", '`');
    assert!(
        stats.get(retries).is_some(),
        "{DOC} says a retry counts in the `{retries}` stat, which Stats does not have"
    );
}

#[test]
fn the_skip_message_example_has_the_default_max_retry_after() {
    let doc = doc();
    let code = format!("{}s", Settings::default().max_retry_after.as_secs());
    let page = stated(&doc, "more than max_retry_after (", ')');
    assert_eq!(
        page, code,
        "{DOC}'s example message says max_retry_after is {page}; its default is {code}"
    );
}

#[test]
fn the_address_policy_is_stated_as_the_code_has_it() {
    let doc = doc();
    let code = if Settings::default().deny_private_addresses {
        "on by default"
    } else {
        "off by default"
    };
    let page = stated(&doc, "`deny_private_addresses` (", ';');
    assert_eq!(
        page, code,
        "{DOC} says deny_private_addresses is `{page}`; the code has it {code}"
    );

    // "link-local or cloud metadata address (169.254.0.0/16, fe80::/10,
    // `metadata.google.internal`…)": every range stated is link-local to the code, from its
    // first address to its last and no further, and every name a metadata host.
    let listed = stated(&doc, "link-local or cloud metadata address (", ')');
    let mut ranges = 0;
    for item in listed.split(',').map(|i| i.trim().trim_end_matches('…')) {
        if let Some(name) = item.strip_prefix('`') {
            let name = name.trim_end_matches('`');
            assert!(
                is_metadata_host(name),
                "{DOC} names `{name}` a metadata address; the code does not"
            );
            continue;
        }
        let (first, last) = cidr(item).unwrap_or_else(|| panic!("{DOC}: `{item}` in `{listed}`"));
        for ip in [first, last] {
            assert_eq!(
                classify(ip),
                AddressClass::LinkLocal,
                "{DOC} says {item} is link-local; the code classes {ip} as {:?}",
                classify(ip)
            );
        }
        for ip in [step(first, -1), step(last, 1)].into_iter().flatten() {
            assert_ne!(
                classify(ip),
                AddressClass::LinkLocal,
                "{DOC} says link-local is {item}; the code also classes {ip} so"
            );
        }
        ranges += 1;
    }
    assert!(ranges >= 2, "{DOC}: no address ranges in `{listed}`");
}

/// The first and last address of `a.b.c.d/n` or `x::/n`.
fn cidr(text: &str) -> Option<(IpAddr, IpAddr)> {
    let (ip, bits) = text.split_once('/')?;
    let bits: u32 = bits.parse().ok()?;
    Some(match ip.parse().ok()? {
        IpAddr::V4(v4) => {
            let host = u32::MAX.checked_shr(bits).unwrap_or(0);
            let base = u32::from(v4) & !host;
            (
                IpAddr::V4(Ipv4Addr::from(base)),
                IpAddr::V4(Ipv4Addr::from(base | host)),
            )
        }
        IpAddr::V6(v6) => {
            let host = u128::MAX.checked_shr(bits).unwrap_or(0);
            let base = u128::from(v6) & !host;
            (
                IpAddr::V6(Ipv6Addr::from(base)),
                IpAddr::V6(Ipv6Addr::from(base | host)),
            )
        }
    })
}

/// The address `by` (±1) away from `ip`, if there is one.
fn step(ip: IpAddr, by: i8) -> Option<IpAddr> {
    Some(match ip {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(
            u32::from(v4).checked_add_signed(i32::from(by))?,
        )),
        IpAddr::V6(v6) => {
            let n = u128::from(v6);
            let n = if by < 0 {
                n.checked_sub(1)?
            } else {
                n.checked_add(1)?
            };
            IpAddr::V6(Ipv6Addr::from(n))
        }
    })
}
