//! Value readers that check while reading: ranges, fractions, tenant ids (errors carry the
//! value's span and key).

use serde::Deserialize;
use serde::de::{Deserializer, Error as _};
use shield::rules::MAX_TENANT_ID;

pub(super) fn range<'de, const LO: u64, const HI: u64, D: Deserializer<'de>>(
    d: D,
) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if v < LO || v > HI {
        return Err(D::Error::custom(format!(
            "must be between {LO} and {HI}, not {v}"
        )));
    }
    Ok(v)
}

pub(super) fn range_u32<'de, const LO: u64, const HI: u64, D: Deserializer<'de>>(
    d: D,
) -> Result<u32, D::Error> {
    range::<LO, HI, D>(d).map(|v| v as u32)
}

pub(super) fn opt_range_u32<'de, const LO: u64, const HI: u64, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<u32>, D::Error> {
    range_u32::<LO, HI, D>(d).map(Some)
}

pub(super) fn range_usize<'de, const LO: u64, const HI: u64, D: Deserializer<'de>>(
    d: D,
) -> Result<usize, D::Error> {
    range::<LO, HI, D>(d).map(|v| v as usize)
}

pub(super) fn fraction<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&v) {
        return Err(D::Error::custom(format!(
            "must be between 0.0 and 1.0, not {v}"
        )));
    }
    Ok(v)
}

pub(super) fn tenant<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    range_u32::<0, { MAX_TENANT_ID as u64 }, D>(d).map(Some)
}
