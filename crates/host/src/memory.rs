//! Keeping the daemon small: at most two malloc arenas, and no start-up code kept resident.

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

/// Drops this process's page-table entries for its own executable code — not the code itself:
/// the pages stay in the page cache, shared with every kube-anchor process on the node. The
/// start-up code (argument parsing, logging set-up, the first render and validation) runs once,
/// yet its pages would count in the daemon's RSS (and the memory cgroup's working set) for good;
/// after this only the code that runs again is mapped again, each page by a minor fault from the
/// page cache (no IO). Returns the bytes released from the resident set.
pub fn release_code_pages() -> usize {
    let (Ok(exe), Ok(maps)) = (
        std::fs::read_link("/proc/self/exe"),
        std::fs::read_to_string("/proc/self/maps"),
    ) else {
        return 0;
    };
    let exe = exe.to_string_lossy();
    let mut released = 0;
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let fields: Vec<&str> = line.splitn(6, ' ').collect();
        if fields.len() < 6 || fields[1] != "r-xp" || fields[5].trim_start() != exe {
            continue;
        }
        let Some((Ok(start), Ok(end))) = fields[0]
            .split_once('-')
            .map(|(s, e)| (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)))
        else {
            continue;
        };
        // SAFETY: the range is a private, read-only, executable mapping of our own binary, which
        // nothing writes (no text relocations); MADV_DONTNEED only unmaps its pages, and the next
        // access reads the same bytes from the file again. Writable or relocated mappings, whose
        // pages hold what the file does not, are never passed here.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += end - start;
        }
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_released_runs_again() {
        // The test binary's own code: released, then executed and formatted through again.
        assert!(
            release_code_pages() > 0,
            "no executable mapping of the test binary found"
        );
        let text = format!("{:?}", (1..4).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(text, "[2, 4, 6]");
        assert!(release_code_pages() > 0);
    }
}
