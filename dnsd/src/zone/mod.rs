//! A zone's life in dnsd: configured and loaded ([`registry`], [`load`]), served
//! ([`served`]: the set the query path reads, with each zone's variants by client network,
//! [`geo`]), listed in catalogs ([`catalog`]), watched for expiring signatures ([`expiry`]).

pub mod catalog;
pub mod expiry;
pub mod geo;
pub mod load;
pub mod registry;
pub mod room;
pub mod served;
