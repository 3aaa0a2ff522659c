//! Checking an image and making its thumbnails (blocking: run off the async runtime). The
//! header is read first: an image over `images_max_pixels` is refused before any pixel is
//! decoded, and the decoder runs under limits, so a decompression bomb (a small file that
//! claims or inflates to gigabytes) is refused instead of allocated.

use std::io::Cursor;

use crawler_core::Settings;
use image::{ImageFormat, ImageReader, Limits};

/// JPEG quality of thumbnails (Scrapy's `ImagesPipeline` saves JPEG at PIL's default, 75;
/// a little higher keeps small text legible in product thumbnails).
const THUMB_QUALITY: u8 = 85;

/// What the images pipeline asks of each image.
#[derive(Debug, Clone)]
pub(super) struct ImageOptions {
    min_width: u32,
    min_height: u32,
    max_pixels: u64,
    thumbs: Vec<(String, u32, u32)>,
}

impl ImageOptions {
    pub(super) fn from_settings(s: &Settings) -> Self {
        Self {
            min_width: s.images_min_width,
            min_height: s.images_min_height,
            max_pixels: s.images_max_pixels,
            thumbs: s
                .images_thumbs
                .iter()
                .map(|(name, [w, h])| (name.clone(), *w, *h))
                .collect(),
        }
    }
}

/// An image that passed, with its thumbnails (JPEG) by name.
pub(super) struct Inspected {
    pub(super) extension: &'static str,
    pub(super) thumbs: Vec<(String, Vec<u8>)>,
}

/// Check `bytes` as an image and make its thumbnails; `Err` says why it is not stored.
pub(super) fn inspect(bytes: &[u8], o: &ImageOptions) -> Result<Inspected, String> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("not an image: {e}"))?;
    let format = reader
        .format()
        .ok_or_else(|| "not an image (unknown format)".to_owned())?;
    let extension = match format {
        ImageFormat::Png => "png",
        ImageFormat::Jpeg => "jpg",
        ImageFormat::Gif => "gif",
        ImageFormat::WebP => "webp",
        other => return Err(format!("an image format not handled: {other:?}")),
    };
    // The header's size, before any pixel: the bound and the minimum need no decoding.
    let (width, height) = ImageReader::with_format(Cursor::new(bytes), format)
        .into_dimensions()
        .map_err(|e| format!("not a readable image: {e}"))?;
    let pixels = u64::from(width) * u64::from(height);
    if pixels > o.max_pixels {
        return Err(format!(
            "{width}x{height} is over images_max_pixels ({}): refused unread",
            o.max_pixels
        ));
    }
    if width < o.min_width || height < o.min_height {
        return Err(format!(
            "{width}x{height} is under the minimum {}x{}",
            o.min_width, o.min_height
        ));
    }
    let mut thumbs = Vec::with_capacity(o.thumbs.len());
    if !o.thumbs.is_empty() {
        let mut limits = Limits::default();
        limits.max_image_width = Some(width);
        limits.max_image_height = Some(height);
        // Four bytes a pixel (RGBA8) plus the decoder's own buffers: what the header
        // allows and no more, whatever the data inflates to.
        limits.max_alloc = Some(o.max_pixels.saturating_mul(4).saturating_add(1 << 20));
        let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
        reader.limits(limits);
        let decoded = reader
            .decode()
            .map_err(|e| format!("cannot decode the image: {e}"))?;
        for (name, w, h) in &o.thumbs {
            let small = decoded.thumbnail(*w, *h).into_rgb8();
            let mut jpeg = Vec::new();
            let encoder =
                image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, THUMB_QUALITY);
            small
                .write_with_encoder(encoder)
                .map_err(|e| format!("cannot make the thumbnail '{name}': {e}"))?;
            thumbs.push((name.clone(), jpeg));
        }
    }
    Ok(Inspected { extension, thumbs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let img = image::RgbImage::from_pixel(width, height, image::Rgb([200, 30, 30]));
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    fn options() -> ImageOptions {
        ImageOptions {
            min_width: 10,
            min_height: 10,
            max_pixels: 1_000_000,
            thumbs: vec![("small".into(), 20, 20)],
        }
    }

    #[test]
    fn thumbnails_keep_the_aspect_ratio_and_small_images_are_refused() {
        let done = inspect(&png(100, 50), &options()).unwrap();
        assert_eq!(done.extension, "png");
        let thumb = image::load_from_memory(&done.thumbs[0].1).unwrap();
        assert_eq!((thumb.width(), thumb.height()), (20, 10));
        let e = inspect(&png(5, 50), &options()).err().unwrap();
        assert!(e.contains("under the minimum"), "{e}");
        let e = inspect(b"<html>not an image</html>", &options())
            .err()
            .unwrap();
        assert!(e.contains("not an image"), "{e}");
    }

    #[test]
    fn a_header_claiming_too_many_pixels_is_refused_unread() {
        // A 1x1 PNG whose header says 100,000 x 100,000 (40 GB decoded): the size check
        // refuses it before the decoder would allocate.
        let mut bomb = png(1, 1);
        // IHDR's width and height are the 4+4 bytes after the 8-byte signature, the
        // chunk length and type (16 bytes in); its CRC (over type and data) follows them.
        bomb[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        bomb[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        let crc = crc32(&bomb[12..29]);
        bomb[29..33].copy_from_slice(&crc.to_be_bytes());
        let e = inspect(&bomb, &options()).err().unwrap();
        assert!(e.contains("100000x100000 is over images_max_pixels"), "{e}");
    }

    /// CRC-32 (IEEE), as PNG chunks carry it.
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
