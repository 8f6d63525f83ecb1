//! Arbitrary inotify events through the event → action decision. Each record is a mask (4
//! bytes), a flags byte (input directory, managed name, paired with a move from our temp file)
//! and a length-prefixed name. Never panics; our own temp files never cause a sync; a sync on a
//! symlink is only asked for on a creation.
#![no_main]

use kube_anchor_core::change::{
    Reaction, Event, IN_CREATE, IN_DELETE_SELF, IN_IGNORED, IN_MOVE_SELF, IN_MOVED_TO, IN_Q_OVERFLOW, classify,
};
use kube_anchor_core::hostpath::is_our_temp;
use libfuzzer_sys::fuzz_target;

const OUR_TEMP: &[u8] = b".a.yaml.XyZ12.kube-anchor.tmp";

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Some((header, tail)) = rest.split_first_chunk::<6>() {
        let mask = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        let flags = header[4];
        let len = (header[5] as usize).min(tail.len());
        let (name, tail) = tail.split_at(len);
        rest = tail;
        let event = Event {
            mask,
            name,
            moved_from: (flags & 4 != 0).then_some(OUR_TEMP),
            input: flags & 1 != 0,
            managed: flags & 2 != 0,
        };
        let action = classify(&event);
        let about_the_watch = mask & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0;
        if is_our_temp(name) && !about_the_watch {
            assert_eq!(action, Reaction::Ignore, "{event:?}");
        }
        if mask & IN_MOVED_TO != 0 && event.moved_from.is_some() && !about_the_watch {
            assert_eq!(action, Reaction::Ignore, "our own commit: {event:?}");
        }
        if action == Reaction::SyncIfSymlink {
            assert!(mask & IN_CREATE != 0, "{event:?}");
        }
        if !event.input && !event.managed && !about_the_watch {
            assert_eq!(action, Reaction::Ignore, "{event:?}");
        }
    }
});
