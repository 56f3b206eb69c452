//! Reads of kernel-generated files (`/proc`, cgroupfs). They report size 0,
//! so std's whole-file reads first probe the size (`statx`, `lseek`) and then
//! grow from a 32-byte buffer, one `read` per doubling: six calls for one
//! `/proc/PID/stat`. A read into a page-sized buffer takes one open and two
//! reads for any of the small ones.

use std::fs::File;
use std::path::Path;

/// What is read into at once.
const PAGE: usize = 4096;

/// The whole of `path`, at most `limit` bytes.
pub(crate) fn read(path: impl AsRef<Path>, limit: usize) -> std::io::Result<Vec<u8>> {
    reread(&File::open(path)?, limit)
}

/// A kernel-generated file read again from its start through an fd kept
/// open (a seq_file such as `cgroup.procs` is generated afresh by a read at
/// offset 0), at most `limit` bytes: no open or close per read.
pub(crate) fn reread(f: &File, limit: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; limit.min(PAGE)];
    let mut len = 0;
    loop {
        if len == buf.len() {
            if len >= limit {
                break;
            }
            buf.resize((len * 2).min(limit), 0);
        }
        let n = f.read_at(&mut buf[len..], len as u64)?;
        if n == 0 {
            break;
        }
        len += n;
    }
    buf.truncate(len);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_proc_file_whole_and_stops_at_the_limit() {
        let whole = read("/proc/self/stat", usize::MAX).unwrap();
        assert!(
            whole.ends_with(b"\n"),
            "{}",
            String::from_utf8_lossy(&whole)
        );
        let stat = crate::proc_hygiene::stat::parse(&whole).unwrap();
        assert_eq!(stat.ppid, std::os::unix::process::parent_id() as i32);
        // Longer than a page: read whole, or cut at the limit.
        let long: Vec<u8> = (0..3 * PAGE + 5).map(|i| (i % 251) as u8).collect();
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), &long).unwrap();
        assert_eq!(read(f.path(), usize::MAX).unwrap(), long);
        assert_eq!(read(f.path(), PAGE + 7).unwrap(), long[..PAGE + 7]);
        assert!(read("/proc/self/no-such-file", 10).is_err());
        let kept = std::fs::File::open(f.path()).unwrap();
        assert_eq!(reread(&kept, usize::MAX).unwrap(), long);
        assert_eq!(reread(&kept, PAGE + 7).unwrap(), long[..PAGE + 7]);
        assert_eq!(reread(&kept, 5).unwrap(), long[..5]);
    }
}
