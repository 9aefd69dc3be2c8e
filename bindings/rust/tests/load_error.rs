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
