// A file that appears under its name whole or not at all: written unnamed beside the target
// (O_TMPFILE), given the target's name only after every byte is on disk, and discarded if it is
// never committed, also when the process is killed half way.
#pragma once
#include <cstddef>
#include <string>

namespace fh {

class AtomicFile {
public:
    // Refuses (FH_ERR_IO) a path that exists and is not a regular file (a device, FIFO,
    // directory or symbolic link): a save must not replace such a node with a file. A new file
    // gets mode 0666 less the umask, as fopen() would give it; a file that replaces one keeps
    // the permission bits of the file it replaces, as fopen() would (a private checkpoint stays
    // private).
    explicit AtomicFile(const char *path);
    ~AtomicFile();  // discards an uncommitted file
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile &operator=(const AtomicFile &) = delete;

    void write(const void *data, size_t n);  // FH_ERR_IO on failure
    // fsync, then give the file its name, replacing a regular file of that name atomically.
    void commit();

private:
    std::string path_, named_tmp_;  // named_tmp_: the fallback's visible temporary name
    int fd_ = -1;
    bool unnamed_ = false;  // O_TMPFILE (nothing to remove if we never commit)
    int keep_mode_ = -1;    // the replaced file's permission bits, or -1 for a new file
    void keep_mode();       // gives the open file keep_mode_ (FH_ERR_IO on failure)
};

// Test seam: called after the last byte is written, before the file gets any name.
extern void (*g_atomic_file_before_commit)();

}  // namespace fh
