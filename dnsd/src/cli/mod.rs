//! The one-shot commands of the `dnsd` binary: [`check_zone`], [`config`] (`check-config`, the
//! config `serve` runs from), [`keys`] (`dnsd key`,
//! `dnsd redis-key`) and [`sign_zone`].

pub mod check_zone;
pub mod config;
pub mod keys;
pub mod sign_zone;
