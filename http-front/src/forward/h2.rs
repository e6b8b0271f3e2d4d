//! h2c upstreams, through hyper's client: the header map edited by the forwarding policy of
//! [`super`], `:authority` only (RFC 9113 §8.3.1), the body pulled by hyper from the
//! client's [`ClientBody`] under its bounds.

use http::header::{self, HeaderValue};
use http::{Request, Response, Version};

use super::reqbody::ClientBody;
use super::upstream::Upstream;
use super::{ClientInfo, ForwardError, HeaderPolicy, RespBody, set_forwarding, strip_hop_by_hop};
use crate::config::Forwarded;

/// Forwards `req` over this worker's h2c connection to `up`; returns the cleaned response.
pub async fn forward(
    up: &Upstream,
    req: Request<ClientBody>,
    host: Option<HeaderValue>,
    fwd: &Forwarded,
    policy: &HeaderPolicy,
    client: &ClientInfo,
) -> Result<Response<RespBody>, ForwardError> {
    let (mut parts, body) = req.into_parts();
    policy.apply(&mut parts.headers);
    let te_trailers = parts
        .headers
        .get(header::TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    strip_hop_by_hop(&mut parts.headers);
    if te_trailers {
        parts
            .headers
            .insert(header::TE, HeaderValue::from_static("trailers"));
    }
    // `:authority` only (RFC 9113 §8.3.1): an origin refuses a request with both as a
    // duplicate host, and the two could differ.
    parts.headers.remove(header::HOST);
    set_forwarding(&mut parts.headers, fwd, client, host.as_ref());
    parts.uri = up.h2_uri(parts.uri.path_and_query(), host.as_ref());
    parts.version = Version::HTTP_2;
    let req = Request::from_parts(parts, body);
    let send =
        async {
            let mut sender = up.h2_sender().await.map_err(|e| {
                tracing::debug!(upstream = %up.cfg.name, error = %e, "no h2c connection");
                ForwardError::Upstream
            })?;
            sender.ready().await.map_err(|e| {
                tracing::debug!(upstream = %up.cfg.name, error = %e, "h2c connection failed");
                ForwardError::Upstream
            })?;
            sender.send_request(req).await.map_err(|e| match body_error(&e) {
            Some(b) => ForwardError::Body(b),
            None => {
                tracing::debug!(upstream = %up.cfg.name, error = %e, "upstream request failed");
                ForwardError::Upstream
            }
        })
        };
    let resp = match tokio::time::timeout(up.cfg.response_timeout, send).await {
        Err(_) => return Err(ForwardError::Timeout),
        Ok(r) => r?,
    };
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    super::strip_for_the_proxy(&mut parts.headers);
    if parts.status == hyper::StatusCode::NO_CONTENT {
        // A 204 carries no length (RFC 9110 §8.6): an HTTP/2 client takes one for an error.
        parts.headers.remove(hyper::header::CONTENT_LENGTH);
    }
    parts.version = Version::HTTP_11;
    Ok(Response::from_parts(parts, RespBody::H2(body)))
}

/// The client body's own error, when that is what failed the exchange.
fn body_error(e: &(dyn std::error::Error + 'static)) -> Option<crate::forward::reqbody::BodyError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(b) = err.downcast_ref::<crate::forward::reqbody::BodyError>() {
            return Some(*b);
        }
        cur = err.source();
    }
    None
}
