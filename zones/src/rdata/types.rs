//! The table: what each known RR type's RDATA is made of.
//!
//! Most types are a list of [`Kind`]s, some add a semantic check (a hook run on the wire
//! form, so text and `\#` input are held to the same rules), and a few irregular types have
//! their own module.

use super::dnssec;
use super::field::Kind::{self, *};
use super::field::{N_1035, N_1035_ADD, N_LOWER, N_LOWER_ADD, N_PLAIN};
use crate::rrtype::t;

/// A type with irregular RDATA, handled by its own module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Custom {
    /// LOC (RFC 1876).
    Loc,
    /// SVCB and HTTPS (RFC 9460).
    Svcb,
    /// APL (RFC 3123).
    Apl,
    /// WKS (RFC 1035 §3.4.2).
    Wks,
    /// IPSECKEY (RFC 4025).
    Ipseckey,
    /// HIP (RFC 8005).
    Hip,
    /// AMTRELAY (RFC 8777).
    Amtrelay,
    /// A6 (RFC 2874).
    A6,
    /// ATMA (ATM Forum af-dans-0152.000).
    Atma,
}

/// How a type's RDATA is described.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Def {
    /// A list of fields.
    Fields(&'static [Kind]),
    /// Its own module.
    Custom(Custom),
    /// Opaque data with no text form other than `\#` (NULL).
    Opaque,
}

/// A semantic check on wire RDATA of a type.
pub(crate) type Hook = fn(u16, &[u8]) -> Result<(), String>;

/// The description of a type: its layout and an optional semantic check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    /// Layout.
    pub def: Def,
    /// Extra rules on top of the layout.
    pub hook: Option<Hook>,
}

const fn f(k: &'static [Kind]) -> Spec {
    Spec {
        def: Def::Fields(k),
        hook: None,
    }
}

const fn h(k: &'static [Kind], hook: Hook) -> Spec {
    Spec {
        def: Def::Fields(k),
        hook: Some(hook),
    }
}

const fn c(c: Custom) -> Spec {
    Spec {
        def: Def::Custom(c),
        hook: None,
    }
}

const SIG: &[Kind] = &[
    RrType,
    Alg,
    U8,
    Period,
    Time,
    Time,
    U16,
    Name(N_LOWER),
    Base64,
];
const DS: &[Kind] = &[U16, Alg, U8, Hex];
const TLSA: &[Kind] = &[U8, U8, U8, Hex];
const DNSKEY: &[Kind] = &[U16, U8, Alg, Base64];

/// The description of `rtype`, if it is known.
pub(crate) fn spec(rtype: u16) -> Option<Spec> {
    Some(match rtype {
        t::A => f(&[Ipv4]),
        t::NS | t::MD | t::MF | t::MB => f(&[Name(N_1035_ADD)]),
        t::CNAME | t::PTR | t::MG | t::MR => f(&[Name(N_1035)]),
        t::SOA => f(&[
            Name(N_1035),
            Name(N_1035),
            U32,
            Period,
            Period,
            Period,
            Period,
        ]),
        t::NULL => Spec {
            def: Def::Opaque,
            hook: None,
        },
        t::WKS => c(Custom::Wks),
        t::HINFO => f(&[Str, Str]),
        t::MINFO => f(&[Name(N_1035), Name(N_1035)]),
        t::MX => f(&[U16, Name(N_1035_ADD)]),
        t::TXT | t::SPF | t::NINFO | t::AVC | t::RESINFO | t::WALLET | t::CLA => f(&[Strs]),
        t::RP => f(&[Name(N_LOWER), Name(N_LOWER)]),
        t::AFSDB | t::RT | t::KX => f(&[U16, Name(N_LOWER_ADD)]),
        t::X25 => f(&[Str]),
        // No RFC gives these a text form (Knot, NSD and BIND refuse any): `\#` only.
        t::UINFO | t::UID | t::GID => Spec {
            def: Def::Opaque,
            hook: None,
        },
        t::ISDN => f(&[Str, StrOpt]),
        t::NSAP => f(&[Nsap]),
        t::NSAP_PTR => f(&[Name(N_PLAIN)]),
        t::SIG | t::RRSIG => f(SIG),
        t::KEY => h(&[U16, U8, Alg, Base64Opt], dnssec::key),
        t::PX => f(&[U16, Name(N_LOWER), Name(N_LOWER)]),
        t::GPOS => f(&[FloatStr, FloatStr, FloatStr]),
        t::AAAA => f(&[Ipv6]),
        t::LOC => c(Custom::Loc),
        t::NXT => f(&[Name(N_LOWER), NxtBitmap]),
        t::EID | t::NIMLOC => f(&[Hex]),
        t::SRV => f(&[U16, U16, U16, Name(N_LOWER_ADD)]),
        t::ATMA => c(Custom::Atma),
        t::NAPTR => f(&[U16, U16, Str, Str, Str, Name(N_LOWER)]),
        t::CERT => f(&[CertType, U16, Alg, Base64]),
        t::A6 => c(Custom::A6),
        t::DNAME => f(&[Name(N_LOWER)]),
        // PowerDNS's ALIAS: its target, uncompressed (a private type, RFC 3597 §4).
        t::ALIAS => f(&[Name(N_LOWER)]),
        t::SINK => f(&[U8, U8, Base64]),
        t::APL => c(Custom::Apl),
        t::DS | t::TA | t::DLV => h(DS, dnssec::ds),
        t::CDS => h(&[U16, Alg, U8, HexZ], dnssec::ds),
        t::SSHFP => h(&[U8, U8, Hex], dnssec::sshfp),
        t::IPSECKEY => c(Custom::Ipseckey),
        t::NSEC => f(&[Name(N_PLAIN), Bitmap]),
        t::DNSKEY | t::RKEY => h(DNSKEY, dnssec::key),
        t::CDNSKEY => h(&[U16, U8, Alg, Base64Z], dnssec::key),
        t::DHCID | t::OPENPGPKEY | t::HHIT | t::BRID => f(&[Base64]),
        t::NSEC3 => h(&[U8, U8, U16, Salt, Hash32, Bitmap], dnssec::nsec3),
        t::NSEC3PARAM => f(&[U8, U8, U16, Salt]),
        t::TLSA | t::SMIMEA => f(TLSA),
        t::HIP => c(Custom::Hip),
        t::TALINK => f(&[Name(N_PLAIN), Name(N_PLAIN)]),
        t::CSYNC => f(&[U32, U16, Bitmap]),
        t::ZONEMD => h(&[U32, U8, U8, Hex], dnssec::zonemd),
        t::SVCB | t::HTTPS => c(Custom::Svcb),
        t::DSYNC => f(&[RrType, DsyncScheme, U16, Name(N_PLAIN)]),
        t::NID | t::L64 => f(&[U16, Ilnp64]),
        t::L32 => f(&[U16, Ipv4]),
        t::LP => f(&[U16, Name(N_PLAIN)]),
        t::EUI48 => f(&[Eui48]),
        t::EUI64 => f(&[Eui64]),
        t::URI => f(&[U16, U16, Text]),
        t::CAA => f(&[U8, CaaTag, Text]),
        t::DOA => f(&[U32, U32, U8, Str, Base64Dash]),
        t::AMTRELAY => c(Custom::Amtrelay),
        t::IPN => f(&[Ipn]),
        _ => return None,
    })
}
