//! The ledger decoder on arbitrary bytes. Never panics; a ledger it accepts encodes and decodes
//! back to itself.
#![no_main]

use kube_anchor_core::ledger::Ledger;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ledger) = Ledger::decode(data) {
        let again = Ledger::decode(&ledger.encode()).expect("an encoded ledger decodes");
        assert_eq!(again, ledger);
    }
});
