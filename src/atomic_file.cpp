#include "atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "error.hpp"

namespace fh {

void (*g_atomic_file_before_commit)() = nullptr;

namespace {

std::string dir_of(const std::string &path) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

// A name beside the target no other save uses: this process's id and a counter.
std::string temp_name(const std::string &path) {
    static std::atomic<unsigned> counter{0};
    return path + ".fhtmp." + std::to_string((long)getpid()) + "." +
           std::to_string(counter.fetch_add(1));
}

}  // namespace

AtomicFile::AtomicFile(const char *path) : path_(path) {
    struct stat st;
    const bool exists = lstat(path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode))
        fail(FH_ERR_IO, "'%s' exists and is not a regular file (a device, FIFO, directory or "
             "symbolic link): refusing to replace it", path);
    if (exists) keep_mode_ = (int)(st.st_mode & 07777);
    // O_TMPFILE: the file has no name until commit(), so a process killed while writing leaves
    // nothing behind. Naming it later goes through /proc/self/fd (linkat with AT_EMPTY_PATH
    // would need CAP_DAC_READ_SEARCH). Filesystems without O_TMPFILE get a named temporary.
    if (access("/proc/self/fd", X_OK) == 0) {
        fd_ = open(dir_of(path_).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        if (fd_ >= 0) {
            unnamed_ = true;
            keep_mode();
            return;
        }
        if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            fail(FH_ERR_IO, "cannot create a file beside '%s': %s", path, strerror(errno));
    }
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
        named_tmp_ = temp_name(path_);
        fd_ = open(named_tmp_.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
        if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) {
        const int e = errno;
        named_tmp_.clear();
        fail(FH_ERR_IO, "cannot create a file beside '%s': %s", path, strerror(e));
    }
    keep_mode();
}

// Called by the constructor only: on failure it discards the file itself (no destructor runs).
void AtomicFile::keep_mode() {
    if (keep_mode_ < 0 || fchmod(fd_, (mode_t)keep_mode_) == 0) return;
    const int e = errno;
    close(fd_);
    fd_ = -1;
    if (!named_tmp_.empty()) unlink(named_tmp_.c_str());
    named_tmp_.clear();
    fail(FH_ERR_IO, "cannot give the file replacing '%s' its mode %04o: %s", path_.c_str(),
         (unsigned)keep_mode_, strerror(e));
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) close(fd_);
    if (!named_tmp_.empty()) unlink(named_tmp_.c_str());
}

void AtomicFile::write(const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t k = ::write(fd_, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            fail(FH_ERR_IO, "cannot write checkpoint '%s': %s", path_.c_str(),
                 k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
    }
}

void AtomicFile::commit() {
    if (fsync(fd_) != 0)
        fail(FH_ERR_IO, "cannot write checkpoint '%s': %s", path_.c_str(), strerror(errno));
    if (g_atomic_file_before_commit) g_atomic_file_before_commit();
    if (unnamed_) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd_);
        // A new name can be linked directly; an existing file is replaced by renaming a linked
        // temporary over it (link cannot replace), the only moment a name other than the
        // target's exists.
        if (linkat(AT_FDCWD, proc, AT_FDCWD, path_.c_str(), AT_SYMLINK_FOLLOW) == 0) {
            close(fd_);
            fd_ = -1;
            return;
        }
        if (errno != EEXIST)
            fail(FH_ERR_IO, "cannot write checkpoint '%s': %s", path_.c_str(), strerror(errno));
        named_tmp_ = temp_name(path_);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, named_tmp_.c_str(), AT_SYMLINK_FOLLOW) != 0) {
            const int e = errno;
            named_tmp_.clear();
            fail(FH_ERR_IO, "cannot write checkpoint '%s': %s", path_.c_str(), strerror(e));
        }
    }
    close(fd_);
    fd_ = -1;
    // The target may have become a non-regular file since the constructor looked.
    struct stat st;
    if (lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        fail(FH_ERR_IO, "'%s' exists and is not a regular file: refusing to replace it",
             path_.c_str());
    if (rename(named_tmp_.c_str(), path_.c_str()) != 0)
        fail(FH_ERR_IO, "cannot write checkpoint '%s': %s", path_.c_str(), strerror(errno));
    named_tmp_.clear();
}

}  // namespace fh
