//! A request head as http-front's rules see it.
//!
//! http-front's own view (`http_front::service::HttpView`) wraps a `Request<hyper::body::Incoming>`,
//! which only hyper's connection code can make, so this mirrors its attribute mapping over a
//! `Request<()>` built from the head (as hyper builds it: httparse, then `http` types). Keep
//! the two in step; making `HttpView` generic over the body would let the fuzzer use it as is.

use http::{Request, header};

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

/// The rules' view of a request: `path`, `query`, `method`, `host`, `user_agent`, `version`,
/// `header:<lower-case name>`.
pub struct View<'a> {
    /// The request.
    pub req: &'a Request<()>,
    /// The normalised host.
    pub host: &'a str,
}

impl shield::rules::Request for View<'_> {
    fn attr(&self, name: &str) -> Option<&str> {
        match name {
            "path" => Some(self.req.uri().path()),
            "method" => Some(self.req.method().as_str()),
            "host" => Some(self.host),
            "user_agent" => self.req.headers().get(header::USER_AGENT)?.to_str().ok(),
            "query" => self.req.uri().query(),
            "version" => Some(match self.req.version() {
                http::Version::HTTP_10 => "HTTP/1.0",
                _ => "HTTP/1.1",
            }),
            _ => {
                let h = name.strip_prefix(shield::rules::attr::HEADER_PREFIX)?;
                self.req.headers().get(h)?.to_str().ok()
            }
        }
    }
}
