//! The sparse copy and the template's format.

use super::*;

#[test]
fn a_sparse_copy_keeps_data_and_holes() {
    let t = tempfile::tempdir().unwrap();
    let from = t.path().join("from");
    let mut f = std::fs::File::create(&from).unwrap();
    f.set_len(64 << 20).unwrap();
    f.seek(SeekFrom::Start(10 << 20)).unwrap();
    f.write_all(b"middle").unwrap();
    f.seek(SeekFrom::Start((64 << 20) - 3)).unwrap();
    f.write_all(b"end").unwrap();
    drop(f);
    let to = t.path().join("to");
    copy_sparse(&from, &to).unwrap();
    assert_eq!(std::fs::read(&from).unwrap(), std::fs::read(&to).unwrap());
    use std::os::unix::fs::MetadataExt;
    assert!(
        std::fs::metadata(&to).unwrap().blocks() * 512 < 1 << 20,
        "holes stay holes"
    );
}

/// What makes a new disk cheap: its template, copied at every start, holds under 1 MiB
/// whatever its size (mkfs's defaults: 4.4 MiB for 20 GiB); one of an earlier release goes.
#[tokio::test]
async fn a_template_holds_under_a_mebibyte_whatever_its_size() {
    use std::os::unix::fs::MetadataExt;
    if Command::new("mkfs.ext4").arg("-V").output().await.is_err() {
        let required = std::env::var("TANDEM_TEST_REQUIRE_WORKSPACES").is_ok_and(|v| v == "1");
        assert!(!required, "the template test needs mkfs.ext4");
        eprintln!("skipped: the template test needs mkfs.ext4");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let bytes = 20 << 30;
    let earlier = t.path().join(format!("ext4-{bytes}.img"));
    std::fs::write(&earlier, b"an earlier release's template").unwrap();
    let path = template(t.path(), bytes).await.unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), bytes as u64);
    let held = meta.blocks() * 512;
    assert!(held < 1 << 20, "the template holds {held} bytes");
    assert!(!earlier.exists(), "the earlier template is removed");
    // Made once: asked again, the same file.
    assert_eq!(template(t.path(), bytes).await.unwrap(), path);
}
