//! Keeping the daemon small: at most two malloc arenas, and no start-up code or data kept resident.

// The one module with unsafe code: two libc calls, each with its SAFETY note.
#![allow(unsafe_code)]

/// At most two glibc malloc arenas for the threads there are (tokio's blocking pool, the
/// executor's concurrent fsyncs); glibc would otherwise give each thread one of its own.
pub fn limit_malloc_arenas() {
    // SAFETY: mallopt only sets an allocator parameter; called before any other thread exists.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Drops this process's page-table entries for the read-only pages it maps from files (its own
/// code and constant data, the shared libraries' code) — not the pages themselves: they stay in
/// the page cache, shared with every process on the node that maps the same files. The start-up
/// code (argument parsing, logging set-up, the first render and validation) runs once, yet its
/// pages would count in the daemon's RSS (and the memory cgroup's working set) for good; after
/// this only what runs again is mapped again, each page by a minor fault from the page cache (no
/// IO). Returns the bytes released from the resident set.
pub fn release_read_only_pages() -> usize {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for (start, end) in read_only_file_mappings(&smaps) {
        // SAFETY: the range is a private, read-only mapping of a file that holds no page of its
        // own (`Anonymous: 0 kB`: nothing was ever copied on write, relocated or patched), and
        // being read-only, never will; MADV_DONTNEED only unmaps its pages, and the next access
        // reads the same bytes from the file again. Writable mappings, and read-only ones with
        // pages that differ from the file (a relocated RELRO segment), are never passed here.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += end - start;
        }
    }
    released
}

/// The address ranges in `smaps` (as `/proc/self/smaps` reads) of private read-only mappings of
/// a file (`r-xp`, `r--p`, path absolute) none of whose pages is anonymous.
fn read_only_file_mappings(smaps: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut candidate = None;
    for line in smaps.lines() {
        // A mapping's first line: start-end perms offset dev inode path; then `Key: value` lines.
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first().is_some_and(|f| f.contains('-') && !f.ends_with(':')) && fields.len() >= 5 {
            candidate = None;
            let read_only = fields[1] == "r-xp" || fields[1] == "r--p";
            let file = fields.get(5).is_some_and(|p| p.starts_with('/'));
            if read_only
                && file
                && let Some((Ok(start), Ok(end))) = fields[0]
                    .split_once('-')
                    .map(|(s, e)| (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)))
            {
                candidate = Some((start, end));
            }
        } else if fields.first() == Some(&"Anonymous:")
            && let Some(range) = candidate.take()
            && fields.get(1) == Some(&"0")
        {
            found.push(range);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_file_mappings_with_no_page_of_their_own_are_released() {
        let smaps = "\
55d0a0000000-55d0a0372000 r--p 00000000 08:01 42    /usr/bin/kube-anchor
Rss:                1360 kB
Anonymous:             0 kB
55d0a0373000-55d0a14c2000 r-xp 00372000 08:01 42    /usr/bin/kube-anchor
Anonymous:             0 kB
55d0a14c3000-55d0a1529000 r--p 014c1000 08:01 42    /usr/bin/kube-anchor
Anonymous:           408 kB
55d0a1529000-55d0a152e000 rw-p 01526000 08:01 42    /usr/bin/kube-anchor
Anonymous:            24 kB
7f0000000000-7f0000001000 rw-p 00000000 00:00 0
Anonymous:             4 kB
7f0000002000-7f0000100000 r-xp 00028000 08:01 77    /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0     [vdso]
Anonymous:             0 kB
";
        assert_eq!(
            read_only_file_mappings(smaps),
            vec![
                (0x55d0a0000000, 0x55d0a0372000),
                (0x55d0a0373000, 0x55d0a14c2000),
                (0x7f0000002000, 0x7f0000100000),
            ],
            "the relocated read-only segment, writable and anonymous mappings and the vDSO stay"
        );
    }

    #[test]
    fn code_released_runs_again() {
        // The test binary's own code: released, then executed and formatted through again.
        assert!(
            release_read_only_pages() > 0,
            "no read-only file mapping of the test binary found"
        );
        let text = format!("{:?}", (1..4).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(text, "[2, 4, 6]");
        assert!(release_read_only_pages() > 0);
    }
}
