//! Where an address leads: the public internet, a private network (the operator's own), or
//! a link-local or cloud-metadata service, which a crawl never reaches unless a setting names
//! it. The downloader refuses addresses by these classes (after DNS, on every hop); the
//! engine marks the follow-up requests of a page served from a private address
//! ([`FROM_PRIVATE_META`]), so a public page cannot lead into an intranet
//! while a crawl started on a private host may go on within private space.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The kind of place an IP address leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// Routable on the internet.
    Public,
    /// Private (RFC 1918), loopback, unique-local (fc00::/7), carrier-grade NAT and the other
    /// ranges that stay inside one network.
    Private,
    /// Link-local (169.254.0.0/16, fe80::/10) and the cloud metadata services' addresses,
    /// where a cloud machine's credentials are served: never reached unless named.
    LinkLocal,
}

/// Request meta key the engine sets (to `true`) on the follow-up requests and redirect hops
/// of a page (or redirect) served from a private or loopback address, and removes from the
/// others. With `deny_private_addresses`, a request may reach private addresses when it
/// carries it or is a start request (depth 0, not a redirect hop). Only private pages'
/// links carry it, so a public crawl's queue pays nothing for it.
pub const FROM_PRIVATE_META: &str = "from_private_address";

/// Mark (or unmark) request meta as coming from a private page (see [`FROM_PRIVATE_META`]).
pub fn mark_from_private(meta: &mut serde_json::Map<String, serde_json::Value>, private: bool) {
    if private {
        meta.insert(FROM_PRIVATE_META.to_owned(), serde_json::Value::Bool(true));
    } else {
        meta.remove(FROM_PRIVATE_META);
    }
}

/// Host names of cloud metadata services (lower case): refused like link-local addresses
/// whatever they resolve to (some resolve only inside the cloud, or through a proxy).
pub const METADATA_HOSTS: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.internal",
    "metadata.tencentyun.com",
    "metadata.platformequinix.com",
];

/// Whether `host` (a URL's host name) names a cloud metadata service.
pub fn is_metadata_host(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    METADATA_HOSTS.iter().any(|m| host.eq_ignore_ascii_case(m))
}

/// The class of `ip`. IPv6 addresses that carry an IPv4 address (mapped, NAT64, 6to4,
/// IPv4-compatible) are judged by the address they lead to.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(v4: Ipv4Addr) -> AddressClass {
    let [a, b, c, d] = v4.octets();
    if v4.is_link_local()
        // Alibaba Cloud's metadata service sits in the carrier-grade NAT range.
        || (a, b, c, d) == (100, 100, 100, 200)
        // Azure's WireServer, reachable from every Azure machine.
        || (a, b, c, d) == (168, 63, 129, 16)
    {
        return AddressClass::LinkLocal;
    }
    let private = v4.is_private()
        || v4.is_loopback()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_documentation()
        || v4.is_multicast()
        || a == 0 // 0.0.0.0/8, "this network"
        || (a == 100 && (b & 0xC0) == 64) // 100.64.0.0/10, carrier-grade NAT
        || (a == 192 && b == 0 && c == 0) // 192.0.0.0/24, IETF protocol assignments
        || (a == 198 && (b & 0xFE) == 18) // 198.18.0.0/15, benchmarking
        || a >= 240; // 240.0.0.0/4, reserved
    if private {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

fn classify_v6(v6: Ipv6Addr) -> AddressClass {
    let seg = v6.segments();
    let embedded =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052): the gateway connects to the IPv4
    // address in the last 32 bits, so 64:ff9b::10.0.0.1 reaches 10.0.0.1.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return classify_v4(embedded(seg[6], seg[7]));
    }
    // 64:ff9b:1::/48 (RFC 8215) is for NAT64 inside one network: private by definition.
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1 {
        return AddressClass::Private;
    }
    // 6to4 2002::/16 (RFC 3056): the relay delivers to the IPv4 address in bits 16-48.
    if seg[0] == 0x2002 {
        return classify_v4(embedded(seg[1], seg[2]));
    }
    // Deprecated IPv4-compatible ::a.b.c.d (the loopback ::1 and :: are handled below).
    if seg[..6] == [0; 6] && (seg[6] != 0 || seg[7] > 1) {
        return classify_v4(embedded(seg[6], seg[7]));
    }
    // fe80::/10 link-local; AWS's IPv6 metadata endpoint fd00:ec2::254.
    if (seg[0] & 0xffc0) == 0xfe80 || seg == [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254] {
        return AddressClass::LinkLocal;
    }
    let private = v6.is_loopback()
        || v6.is_unspecified()
        || v6.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00 // unique local
        || (seg[0] & 0xffc0) == 0xfec0 // site local (deprecated, still routed internally)
        || (seg[0] == 0x2001 && seg[1] == 0x0db8); // documentation
    if private {
        AddressClass::Private
    } else {
        AddressClass::Public
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(ip: &str) -> AddressClass {
        classify(ip.parse().unwrap())
    }

    #[test]
    fn link_local_and_metadata_addresses_are_their_own_class() {
        for ip in [
            "169.254.169.254",
            "169.254.0.1",
            "fe80::1",
            "febf::1",
            "fd00:ec2::254",
            "100.100.100.200",
            "168.63.129.16",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe", // NAT64 to 169.254.169.254
            "2002:a9fe:a9fe::1",  // 6to4 of 169.254.169.254
        ] {
            assert_eq!(class(ip), AddressClass::LinkLocal, "{ip}");
        }
    }

    #[test]
    fn private_loopback_and_unique_local_addresses_are_private() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fd00:ec2::253",
            "::ffff:127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::10.0.0.1",
            "64:ff9b:1::8.8.8.8",
            "2002:c0a8:101::1",
            "::10.0.0.1",
            "2001:db8::1",
            "ff02::1",
            "198.18.0.1",
            "240.0.0.1",
        ] {
            assert_eq!(class(ip), AddressClass::Private, "{ip}");
        }
    }

    #[test]
    fn routable_addresses_are_public() {
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "169.255.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "2001:4860::8888",
        ] {
            assert_eq!(class(ip), AddressClass::Public, "{ip}");
        }
    }

    #[test]
    fn metadata_names_are_known_whatever_their_case() {
        assert!(is_metadata_host("metadata.google.internal"));
        assert!(is_metadata_host("Metadata.Google.Internal."));
        assert!(is_metadata_host("metadata"));
        assert!(!is_metadata_host("metadata.example.com"));
        assert!(!is_metadata_host("example.com"));
    }
}
