//! A request head as hyper reads it, for http-front's own `HttpView` (generic over the body),
//! and an independent percent-decoder for the path differential.

use http::Request;

/// Parses an HTTP/1.x request head the way hyper does (httparse, up to 100 headers, then the
/// `http` crate's checks); `None` where hyper would answer 400/431 instead.
pub fn parse_head(head: &[u8]) -> Option<Request<()>> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    let mut b = Request::builder()
        .method(r.method?)
        .uri(r.path?)
        .version(if r.version? == 0 {
            http::Version::HTTP_10
        } else {
            http::Version::HTTP_11
        });
    for h in r.headers.iter() {
        b = b.header(h.name, h.value);
    }
    b.body(()).ok()
}

/// `path` percent-decoded once, as an origin decodes it (`%2F`/`%5C` left as they are when
/// `keep_slash`); `None` when an encoding is invalid or the result is not UTF-8. Written apart
/// from http-front's normaliser on purpose: the differential check compares the two.
pub fn decode_once(path: &str, keep_slash: bool) -> Option<String> {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            let v = u8::from_str_radix(hex, 16).ok()?;
            if keep_slash && (v == b'/' || v == b'\\') {
                out.extend_from_slice(&b[i..i + 3]);
            } else {
                out.push(v);
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
