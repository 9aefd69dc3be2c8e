//! What a user sees when the library cannot be found (a process of its own: it sets
//! FOXHUNT_LIBRARY, which the other tests read).
use foxhunt::{Error, Library};

#[test]
fn load_errors_say_how_to_point_at_the_library() {
    std::env::set_var("FOXHUNT_LIBRARY", "/nonexistent/libfoxhunt.so");
    match Library::load() {
        Err(Error::Load(m)) => {
            assert!(m.contains("/nonexistent/libfoxhunt.so"), "{}", m);
            assert!(m.contains("FOXHUNT_LIBRARY"), "{}", m);
        }
        Err(e) => panic!("expected a load error, got {}", e),
        Ok(_) => panic!("loaded a library that does not exist"),
    }
    std::env::remove_var("FOXHUNT_LIBRARY");
    // Found through the loader if installed system-wide; otherwise the error says what to set.
    if let Err(e) = Library::load() {
        let m = e.to_string();
        assert!(
            m.contains("set FOXHUNT_LIBRARY to the library's full path"),
            "{}",
            m
        );
    }
}

/// A library of another version may lack this version's functions: that is a version error,
/// not a failure to load. A stub with only `fh_version` (returning 0.1.0, as the 0.1 library
/// did, which had no fh_pipeline_train) stands for it; skipped without a C compiler.
#[test]
fn an_older_library_is_a_version_error() {
    let dir = std::env::temp_dir().join(format!("foxhunt-stub-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("stub.c");
    let lib = dir.join("libstub.so");
    std::fs::write(&src, "unsigned fh_version(void) { return 100; }\n").unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status();
    if !matches!(built, Ok(s) if s.success()) {
        eprintln!("no C compiler: skipped");
        return;
    }
    match Library::open(&lib) {
        Err(Error::Version { found, .. }) => assert_eq!(found, (0, 1, 0)),
        Err(e) => panic!("expected a version error, got {}", e),
        Ok(_) => panic!("loaded a 0.1 stub"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
