//! inotify read buffers through the parser and the event → action decision. The first byte says
//! which watch descriptors are input directories and which names are managed. Never panics; our
//! own temp files never cause a sync; a sync on a symlink is only asked for on a creation.
#![no_main]

use kube_anchor_host::watch::{
    Action, Event, IN_CREATE, IN_DELETE_SELF, IN_IGNORED, IN_MOVE_SELF, IN_MOVED_FROM, IN_MOVED_TO, IN_Q_OVERFLOW,
    classify, is_our_temp, parse_events,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, buf)) = data.split_first() else {
        return;
    };
    let mut moved_from: Option<(i32, u32, &[u8])> = None;
    for raw in parse_events(buf) {
        let from = match moved_from {
            Some((wd, cookie, name)) if raw.mask & IN_MOVED_TO != 0 && wd == raw.wd && cookie == raw.cookie => {
                Some(name)
            }
            _ => None,
        };
        if raw.mask & IN_MOVED_FROM != 0 {
            moved_from = Some((raw.wd, raw.cookie, raw.name));
        }
        let bit = (raw.wd & 3) as u8;
        let event = Event {
            mask: raw.mask,
            name: raw.name,
            moved_from: from,
            input: flags & (1 << bit) != 0,
            managed: flags & (1 << (bit + 4)) != 0,
        };
        let action = classify(&event);
        let about_the_watch = raw.mask & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0;
        if is_our_temp(raw.name) && !about_the_watch {
            assert_eq!(action, Action::Ignore, "{event:?}");
        }
        if action == Action::SyncIfSymlink {
            assert!(raw.mask & IN_CREATE != 0, "{event:?}");
        }
        if !event.input && !event.managed && !about_the_watch {
            assert_eq!(action, Action::Ignore, "{event:?}");
        }
    }
});
