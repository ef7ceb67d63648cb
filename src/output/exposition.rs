//! What one collection publishes: the page in every format a scrape can ask for, rendered and
//! compressed once on the collection thread, never per scrape, and held as shared [`Bytes`]:
//! a scrape's body is that very buffer (a reference count, no copy) followed by a small tail
//! (where the tail does not change per scrape, the HTTP side joins the two once per build
//! and sends one buffer: `output/http/routes.rs`).
//!
//! The exporter's own metrics change between scrapes and are appended per request. To keep
//! the big page compressed once, its gzip variant is cached as a gzip header plus deflate
//! blocks ended by a full flush (byte-aligned, no back-references past that point); a scrape
//! compresses only the small self-metrics tail as the final deflate block and writes the
//! gzip trailer (CRC-32 of page + tail, and the length). The result is one ordinary gzip
//! member that any decoder reads.

use crate::model::Page;
use crate::output::{openmetrics, render};
use bytes::Bytes;
use crc32fast::Hasher as Crc;
use flate2::{Compress, Compression, FlushCompress};
use prometheus::proto::MetricFamily;
use prometheus::Encoder;

pub(crate) const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The formats a scrape can be answered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4.
    Text,
    /// OpenMetrics 1.0.
    OpenMetrics,
}

impl Format {
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Text => TEXT_CONTENT_TYPE,
            Format::OpenMetrics => openmetrics::CONTENT_TYPE,
        }
    }
}

/// A page in one format, plain and as the open start of a gzip member.
struct Variant {
    plain: Bytes,
    gzip_head: Bytes,
    crc: Crc,
}

impl Variant {
    fn new(plain: Vec<u8>) -> Variant {
        // gzip header: magic, deflate, no flags, no mtime, no extra flags, OS unknown.
        let mut gzip_head = Vec::with_capacity(plain.len() / 8 + 64);
        gzip_head.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
        PAGE_DEFLATE.with(|c| {
            let mut c = c.borrow_mut();
            c.reset();
            deflate_with(&mut c, &plain, FlushCompress::Full, &mut gzip_head);
        });
        let mut crc = Crc::new();
        crc.update(&plain);
        Variant {
            plain: Bytes::from(plain),
            gzip_head: Bytes::from(gzip_head),
            crc,
        }
    }

    /// The shared page (or open gzip member) and what ends it after `tail`.
    fn body(&self, tail: Vec<u8>, gzip: bool) -> Body {
        if !gzip {
            return Body {
                page: self.plain.clone(),
                tail: Bytes::from(tail),
            };
        }
        let mut end = Vec::with_capacity(tail.len() / 2 + 64);
        deflate(&tail, Compression::fast(), FlushCompress::Finish, &mut end);
        let mut crc = self.crc.clone();
        crc.update(&tail);
        end.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE is the length modulo 2^32 (RFC 1952).
        let len = (self.plain.len() + tail.len()) as u64 as u32;
        end.extend_from_slice(&len.to_le_bytes());
        Body {
            page: self.gzip_head.clone(),
            tail: Bytes::from(end),
        }
    }
}

/// A response body: the published page, shared, then the bytes of this scrape.
#[derive(Clone, Debug)]
pub struct Body {
    pub page: Bytes,
    pub tail: Bytes,
}

impl Body {
    pub fn len(&self) -> usize {
        self.page.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Both parts in one buffer (a copy: for tests and small consumers only).
    pub fn to_vec(&self) -> Vec<u8> {
        [&self.page[..], &self.tail[..]].concat()
    }
}

/// The level the page is compressed at, once per collection. Measured on the 8- and 32-GPU
/// bench pages (bench/README.md): level 1 (miniz_oxide's fast mode) takes a seventh to a
/// tenth of the time of the default level 6 for 16-21 % more bytes; at level 6 compression
/// was about a quarter of the exporter's CPU.
const PAGE_LEVEL: u32 = 1;

thread_local! {
    /// The page's compressor, kept between collections (its tables are some 300 kB): only
    /// the collection thread renders pages.
    static PAGE_DEFLATE: std::cell::RefCell<Compress> =
        std::cell::RefCell::new(Compress::new(Compression::new(PAGE_LEVEL), false));
}

/// Raw deflate of `input` appended to `out`, ended by `flush` (Full or Finish).
fn deflate(input: &[u8], level: Compression, flush: FlushCompress, out: &mut Vec<u8>) {
    let mut c = Compress::new(level, false);
    deflate_with(&mut c, input, flush, out);
}

fn deflate_with(c: &mut Compress, input: &[u8], flush: FlushCompress, out: &mut Vec<u8>) {
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve((input.len() / 2).max(4096));
        }
        let consumed = c.total_in() as usize;
        let status = match c.compress_vec(&input[consumed..], out, flush) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("gzip: {e}");
                return;
            }
        };
        let all_in = c.total_in() as usize == input.len();
        // A flush is complete once every byte went in and the output did not fill the room.
        let flushed = all_in && out.len() < out.capacity();
        match (status, flush) {
            (flate2::Status::StreamEnd, _) => return,
            (_, FlushCompress::Full) if flushed => return,
            _ => {}
        }
    }
}

/// One collection's page in every format asked for at startup.
pub struct Exposition {
    text: Variant,
    openmetrics: Option<Variant>,
}

impl Exposition {
    /// An empty page (before the first collection and during an outage).
    pub fn empty(openmetrics: bool) -> Exposition {
        Exposition {
            text: Variant::new(Vec::new()),
            openmetrics: openmetrics.then(|| Variant::new(Vec::new())),
        }
    }

    /// Renders the page once per format (and compresses each once).
    pub fn render(page: &Page, openmetrics: bool) -> Exposition {
        Exposition::render_after(page, openmetrics, None)
    }

    /// Like [`Exposition::render`], with the previous collection's page to size the buffers:
    /// each is allocated once, at about the size it will have.
    pub(crate) fn render_after(
        page: &Page,
        openmetrics: bool,
        previous: Option<&Exposition>,
    ) -> Exposition {
        let hint = |v: Option<&Variant>| v.map_or(0, |v| v.plain.len() + v.plain.len() / 16);
        let mut text = Vec::with_capacity(hint(previous.map(|p| &p.text)));
        render::text(page, &mut text);
        let om = openmetrics.then(|| {
            let previous = previous.and_then(|p| p.openmetrics.as_ref());
            let mut out = Vec::with_capacity(hint(previous).max(text.len() + text.len() / 8));
            openmetrics::page(page, &mut out);
            Variant::new(out)
        });
        Exposition {
            text: Variant::new(text),
            openmetrics: om,
        }
    }

    /// The page in Prometheus text format, without self-metrics.
    pub fn text(&self) -> &[u8] {
        &self.text.plain
    }

    /// The response body: the cached page followed by `tail` (families encoded per scrape),
    /// optionally gzip-compressed. OpenMetrics falls back to text when it was not rendered.
    pub fn body(&self, format: Format, tail: &[MetricFamily], gzip: bool) -> (Format, Body) {
        let mut tail_bytes = Vec::with_capacity(8192);
        match (format, &self.openmetrics) {
            (Format::OpenMetrics, Some(v)) => {
                openmetrics::encode(tail, &mut tail_bytes);
                tail_bytes.extend_from_slice(openmetrics::EOF);
                (Format::OpenMetrics, v.body(tail_bytes, gzip))
            }
            _ => {
                if let Err(e) = prometheus::TextEncoder::new().encode(tail, &mut tail_bytes) {
                    tracing::error!("encoding self metrics failed: {e}");
                }
                (Format::Text, self.text.body(tail_bytes, gzip))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::naming::PromType;
    use std::io::Read;

    fn page(series: usize) -> Page {
        let mut p = Page::default();
        for i in 0..series {
            let gpu = i.to_string();
            p.add(
                "DCGM_FI_DEV_GPU_TEMP",
                "temp",
                PromType::Gauge,
                &[("gpu", &gpu)],
                40.0 + i as f64,
            );
            p.add(
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "energy",
                PromType::Counter,
                &[("gpu", &gpu)],
                1e9 + i as f64,
            );
        }
        p
    }

    fn families(series: usize) -> Vec<MetricFamily> {
        crate::output::render::reference::families(&page(series))
    }

    fn gunzip_single_member(body: &[u8]) -> Vec<u8> {
        // GzDecoder reads exactly one member: the body must be one complete member.
        let mut d = flate2::read::GzDecoder::new(body);
        let mut out = Vec::new();
        d.read_to_end(&mut out).expect("valid gzip");
        out
    }

    #[test]
    fn gzip_body_is_one_member_of_page_plus_tail() {
        let tail = families(3);
        let e = Exposition::render(&page(500), true);
        for format in [Format::Text, Format::OpenMetrics] {
            let (f, plain) = e.body(format, &tail, false);
            let (_, gz) = e.body(format, &tail, true);
            let (plain, gz) = (plain.to_vec(), gz.to_vec());
            assert_eq!(f, format);
            assert!(
                gz.len() * 5 < plain.len(),
                "{} vs {}",
                gz.len(),
                plain.len()
            );
            assert_eq!(gunzip_single_member(&gz), plain);
        }
        let (_, om) = e.body(Format::OpenMetrics, &tail, false);
        assert!(String::from_utf8(om.to_vec()).unwrap().ends_with("# EOF\n"));
    }

    #[test]
    fn a_scrape_shares_the_published_page_instead_of_copying_it() {
        let e = Exposition::render(&page(200), true);
        let tail = families(2);
        for format in [Format::Text, Format::OpenMetrics] {
            for gzip in [false, true] {
                let (_, a) = e.body(format, &tail, gzip);
                let (_, b) = e.body(format, &tail, gzip);
                // The page part is the buffer rendered at publication, not a copy of it.
                assert_eq!(a.page.as_ptr(), b.page.as_ptr(), "{format:?} gzip={gzip}");
                assert!(a.page.len() > 10 * a.tail.len(), "{format:?} gzip={gzip}");
            }
        }
        assert_eq!(
            e.body(Format::Text, &tail, false).1.page.as_ptr(),
            e.text().as_ptr()
        );
    }

    #[test]
    fn the_kept_compressor_starts_each_page_afresh() {
        // The same thread renders page after page with one compressor.
        let mut previous: Option<Exposition> = None;
        for series in [300, 5, 0, 300] {
            let p = page(series);
            let e = Exposition::render_after(&p, true, previous.as_ref());
            for format in [Format::Text, Format::OpenMetrics] {
                let (_, plain) = e.body(format, &[], false);
                let (_, gz) = e.body(format, &[], true);
                assert_eq!(gunzip_single_member(&gz.to_vec()), plain.to_vec());
            }
            assert_eq!(e.text(), crate::output::render::encode(&p));
            previous = Some(e);
        }
    }

    #[test]
    fn empty_pages_and_text_fallback() {
        let e = Exposition::empty(false);
        let (f, body) = e.body(Format::OpenMetrics, &[], true);
        assert_eq!(f, Format::Text);
        assert!(gunzip_single_member(&body.to_vec()).is_empty());
        let e = Exposition::empty(true);
        let (f, body) = e.body(Format::OpenMetrics, &[], true);
        assert_eq!(f, Format::OpenMetrics);
        assert_eq!(gunzip_single_member(&body.to_vec()), b"# EOF\n");
    }
}
