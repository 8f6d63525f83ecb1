//! What the one-shot verbs print on stdout. A reader that goes away (`kube-anchor remove | head
//! -1`) must not stop a verb halfway: `print!` panics on a closed pipe, and a `remove` that died
//! after the manifest would leave the credentials behind. So a failed write to stdout is dropped
//! and the verb finishes its work and exits as it would have; its result is the exit code and
//! the node, not the text.

use std::io::Write;

/// The exit code of a verb that failed (the message names the file and the cause).
pub(crate) const EXIT_ERROR: u8 = 1;
/// `status` and `fleet`: the node or the fleet is not as its inputs say.
pub(crate) const EXIT_OUT_OF_SYNC: u8 = 3;

/// `print!` to stdout, never failing.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write(format_args!($($arg)*), false) };
}

/// `println!` to stdout, never failing.
macro_rules! outln {
    () => { $crate::output::write(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::output::write(format_args!($($arg)*), true) };
}

pub(crate) use {out, outln};

pub(crate) fn write(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_fmt(args);
    if newline {
        let _ = stdout.write_all(b"\n");
    }
}
