//! Where messages leave the pipeline for the transfer side: NOTIFY, AXFR and IXFR are handed
//! to whatever [`Transfers`] the daemon plugs in (the [`crate::xfr`] subsystem), which
//! answers them or returns a [`TransferJob`] that streams a zone on the TCP connection. The
//! same side holds the TSIG keys: it verifies a signed request for the pipeline
//! ([`Transfers::verify`]), which signs the response last whatever answered it. The pipeline
//! never names the transfer code: a transfer side built on the query path reaches down,
//! never up.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc;
use zones::rrtype::t;

use crate::observe::counters::WorkerStats;
use crate::query::module::Transport;
use crate::query::tsig::Signer;
use crate::query::wire::{Query, opcode};
use crate::zone::served::ZoneSet;

/// True when the transfer side answers this message: NOTIFY, and AXFR/IXFR (except AXFR
/// over UDP, which the pipeline answers NOTIMP).
#[inline]
pub fn wants(q: &Query, transport: Transport) -> bool {
    q.opcode() == opcode::NOTIFY
        || q.qtype == t::IXFR
        || (q.qtype == t::AXFR && transport == Transport::Tcp)
}

/// A message handed to the transfer side.
pub struct Ctx<'a> {
    /// The request.
    pub req: &'a [u8],
    /// Its parse.
    pub q: &'a Query,
    /// Who sent it.
    pub src: SocketAddr,
    /// Over what.
    pub transport: Transport,
    /// Over TLS (DNS over TLS, zone transfers over TLS).
    pub tls: bool,
    /// The zones served.
    pub zones: &'a ZoneSet,
    /// Counters of the transport.
    pub stats: &'a WorkerStats,
    /// Our EDNS UDP payload size (`[server] udp_payload`).
    pub udp_payload: u16,
    /// What the replies' OPT carries besides an EDE, as every other reply's: our cookie, the
    /// NSID, the keepalive, padding.
    pub opt: ReplyOpt<'a>,
}

/// The options of a reply the transfer side makes, as the pipeline's replies carry them.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplyOpt<'a> {
    /// Our server cookie for the client's (RFC 7873).
    pub cookie: Option<crate::query::module::CookieOut>,
    /// Our name server identifier, when asked (RFC 5001).
    pub nsid: Option<&'a [u8]>,
    /// The idle timeout announced, when asked over TCP (RFC 7828), in units of 100 ms.
    pub keepalive: Option<u16>,
    /// Pad the reply (a padded query over TLS).
    pub pad: bool,
}

impl Ctx<'_> {
    /// The most a response may take (as for any other response).
    pub fn limit(&self, out: usize) -> usize {
        crate::query::response::size_limit(self.q, self.transport, self.udp_payload, out)
    }
}

/// What the pipeline should do with a message the transfer side took.
pub enum Handled {
    /// Send this many bytes of the output buffer.
    Reply(usize),
    /// Send nothing.
    Drop,
    /// Stream a transfer on this TCP connection.
    Job(Box<dyn TransferJob>),
}

/// The transfer side as the pipeline sees it.
pub trait Transfers: Send + Sync {
    /// Verifies the TSIG at `off` of a signed request: the signer of its response, or the
    /// length of the error reply (RFC 8945 §5.2) written into `out`.
    fn verify(&self, c: &Ctx<'_>, off: usize, out: &mut [u8]) -> Result<Signer, usize>;
    /// Answers a message [`wants`] says is its own (signed with `signer` when the request
    /// was), into `out`.
    fn process(&self, c: &Ctx<'_>, signer: Option<Signer>, out: &mut [u8]) -> Handled;
}

/// A framed message on its way to a TCP connection's writer, with the pipeline slot its
/// query holds until it is written (an answer, or the empty marker that follows a
/// transfer's last message).
pub struct Outgoing {
    /// The framed message (empty: the marker).
    pub msg: Vec<u8>,
    /// The query's slot, released once this is written.
    pub slot: Option<OwnedSemaphorePermit>,
    /// Its share of the connection's unsent-bytes budget, released once it is written.
    pub bytes: Option<OwnedSemaphorePermit>,
}

impl From<Vec<u8>> for Outgoing {
    /// A transfer message: its query's slot comes with the marker after the last one.
    fn from(msg: Vec<u8>) -> Self {
        Outgoing {
            msg,
            slot: None,
            bytes: None,
        }
    }
}

/// A zone transfer to stream on the connection that asked for it.
pub trait TransferJob: Send {
    /// Streams the transfer into `tx` (waiting while it is full); false when the connection
    /// went away.
    fn run(
        self: Box<Self>,
        tx: mpsc::Sender<Outgoing>,
    ) -> Pin<Box<dyn Future<Output = bool> + Send>>;
}
