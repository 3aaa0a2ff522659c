//! `/media/`: images and documents for the files and images pipelines (their tests and
//! examples), each with validators, so a re-crawl can be answered 304.
//!
//! - `/media/img-WxH-N.png`: a W x H PNG (1 to 2,000 pixels a side) of one colour drawn
//!   from N: the same W, H and N give the same bytes, whatever else the URL says (a query),
//!   so two URLs can serve one content.
//! - `/media/doc-N.pdf`: a small document whose bytes depend on N only.
//! - `/media/bomb.png`: a PNG of a few dozen bytes whose header claims 100,000 x 100,000
//!   pixels (40 GB decoded): a decompression bomb a crawler must refuse unread.

use std::io::Write;

use flate2::Compression;
use flate2::write::ZlibEncoder;

use super::conditional::validate_as;
use crate::server::{Reply, Req};
use crate::site::Validators;

/// The largest side of a generated image (12 MB of pixels at most).
const MAX_SIDE: u32 = 2_000;
/// Every media file's Last-Modified (they never change).
const MODIFIED: u64 = 1_700_000_000;

/// Answer `/media/REST`; false when REST is not a media path.
pub(super) fn route(rest: &str, req: &Req<'_>, reply: &mut Reply) -> bool {
    if rest == "bomb.png" {
        reply.header("Content-Type", "image/png");
        reply
            .body
            .extend_from_slice(&png_claiming(100_000, 100_000));
        return true;
    }
    if let Some(n) = rest
        .strip_prefix("doc-")
        .and_then(|r| r.strip_suffix(".pdf"))
        .and_then(|n| n.parse::<u64>().ok())
    {
        if validate_as(req, validators(&[n, 0, 0]), reply, "application/pdf") {
            let body = format!("%PDF-1.4\n% crawler lab document {n}\n%%EOF\n");
            reply.body.extend_from_slice(body.as_bytes());
        }
        return true;
    }
    let Some((w, h, n)) = image_of(rest) else {
        return false;
    };
    if validate_as(
        req,
        validators(&[w.into(), h.into(), n]),
        reply,
        "image/png",
    ) {
        reply.body.extend_from_slice(&png(w, h, colour(n)));
    }
    true
}

/// `img-WxH-N.png` read.
fn image_of(rest: &str) -> Option<(u32, u32, u64)> {
    let spec = rest.strip_prefix("img-")?.strip_suffix(".png")?;
    let (size, n) = spec.split_once('-')?;
    let (w, h) = size.split_once('x')?;
    let (w, h): (u32, u32) = (w.parse().ok()?, h.parse().ok()?);
    let n = n.parse().ok()?;
    ((1..=MAX_SIDE).contains(&w) && (1..=MAX_SIDE).contains(&h)).then_some((w, h, n))
}

fn validators(parts: &[u64]) -> Validators {
    let etag = parts.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &p| {
        (h ^ p).wrapping_mul(0x0100_0000_01b3)
    });
    Validators {
        etag,
        last_modified: MODIFIED,
    }
}

fn colour(n: u64) -> [u8; 3] {
    let x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    [(x >> 56) as u8, (x >> 48) as u8, (x >> 40) as u8]
}

/// A PNG of one colour.
fn png(width: u32, height: u32, rgb: [u8; 3]) -> Vec<u8> {
    // Each row: filter type 0 (none), then the pixels.
    let mut row = Vec::with_capacity(1 + 3 * width as usize);
    row.push(0);
    for _ in 0..width {
        row.extend_from_slice(&rgb);
    }
    let raw = row.repeat(height as usize);
    encode(width, height, &raw)
}

/// A PNG whose header says `width` x `height` over the pixel data of one row of one pixel:
/// a reader that trusts the header allocates for the claim.
fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    encode(width, height, &[0, 0, 0, 0])
}

fn encode(width: u32, height: u32, raw: &[u8]) -> Vec<u8> {
    let mut z = ZlibEncoder::new(Vec::new(), Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = z.write_all(raw);
    let idat = z.finish().unwrap_or_default();
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // 8-bit truecolour, deflate, adaptive filtering, no interlace.
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &idat);
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = crc32fast::Hasher::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_paths_are_read_and_bounded() {
        assert_eq!(image_of("img-300x200-7.png"), Some((300, 200, 7)));
        assert_eq!(image_of("img-0x200-7.png"), None);
        assert_eq!(image_of("img-3000x200-7.png"), None);
        assert_eq!(image_of("img-3x2.png"), None);
    }

    #[test]
    fn a_png_has_its_size_in_its_header() {
        let p = png(3, 2, colour(1));
        assert_eq!(&p[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&p[16..24], &[0, 0, 0, 3, 0, 0, 0, 2]);
        assert_eq!(
            &png_claiming(100_000, 100_000)[16..20],
            &100_000u32.to_be_bytes()
        );
    }
}
