/* envrun-repeat: a repeat launch from a checkout's bin/envrun without starting Python.

   Python's start alone (`python -I -S -c pass`) costs ~11 ms of every envrun launch on a 2-core node (the
   measurements are in docs/reports/performance.md); on a repeat launch everything else envrun does is reading
   one kept plan, asking its facts again and exec. This program does that part, and nothing else:

       envrun-repeat SELF N FALLBACK_1 .. FALLBACK_N USER_ARGS...

   It computes the key of the plan kept for USER_ARGS (envbuild/launch/repeatplan.py writes the file: its
   docstring is the format), reads the file from the user's own cache under the same rules as
   envbuild.host.usercache (a 0700-or-stricter directory and a regular file, both the user's and writable by
   nobody else, never through a link), asks every fact's question again as envbuild.launch.plancache.observe
   does, and execs the plan only when every answer is the recorded one. Anything else (no file, a foreign
   or malformed file, a fact that differs or that this program cannot ask, a variable it cannot read as
   Python would, a failed exec) execs FALLBACK_1..N followed by USER_ARGS: the Python launch, which plans
   (and says what is wrong) exactly as without this program. So this program can only be faster than the
   Python path, never decide differently: a doubt is always a miss.

   Plain C99 and POSIX with glibc's sched_getaffinity: no library beyond libc, built by provision/python-env.sh. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <unistd.h>

extern char **environ;

/* What the file starts with: bump with REPEAT_FORMAT in envbuild/launch/repeatplan.py. */
static const char MAGIC[] = "envrun-repeat-plan 1";
static const unsigned SLOTS = 256;       /* as PLAN_SLOTS in envbuild/launch/plancache.py */
static const off_t LIMIT = 16 << 20;     /* as usercache's: a bigger file is not ours */

static char **fallback_argv;             /* the Python launch: FALLBACK_1..N then USER_ARGS */

static char **original_environ;          /* the environment this program was given: the Python launch's */

static int tracing;                      /* $ENVRUN_REPEAT_TRACE set: say why a launch falls back to Python */
static const char *missed_fact = "";     /* the kind of fact that differed, for that line */
static const char *fact_subject = "";    /* and its path or name */

/* Exec the Python launch; only when that fails, say so as the shell would have. */
#define fall_back() fall_back_because(__LINE__)
static void __attribute__((noreturn)) fall_back_because(int line) {
    if (tracing)
        fprintf(stderr, "envrun-repeat: Python plans (repeatlaunch.c:%d)%s%s %s\n", line, *missed_fact ? ": this fact differs: " : "",
                missed_fact, fact_subject ? fact_subject : "");
    if (original_environ) environ = original_environ;
    execvp(fallback_argv[0], fallback_argv);
    fprintf(stderr, "envrun: cannot run %s: %s\n", fallback_argv[0], strerror(errno));
    exit(127);
}

static void *grown(void *block, size_t size) {
    void *bigger = realloc(block, size ? size : 1);
    if (!bigger) fall_back();
    return bigger;
}

/* --- bytes --------------------------------------------------------------------------------------------- */
typedef struct { char *data; size_t len, cap; } Bytes;

static void put(Bytes *out, const void *data, size_t len) {
    if (out->len + len + 1 > out->cap) {
        out->cap = (out->len + len + 1) * 2;
        out->data = grown(out->data, out->cap);
    }
    memcpy(out->data + out->len, data, len);
    out->len += len;
    out->data[out->len] = '\0';
}

static void put_text(Bytes *out, const char *text) { put(out, text, strlen(text)); }

static void put_format(Bytes *out, const char *format, long long a) {
    char number[64];
    int len = snprintf(number, sizeof number, format, a);
    put(out, number, (size_t)len);
}

static uint32_t crc32_of(const char *data, size_t len) {  /* zlib's crc32 (reflected 0xEDB88320) */
    static uint32_t table[256];
    if (!table[1]) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[n] = c;
        }
    }
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) crc = table[(crc ^ (unsigned char)data[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* --- the plan file: netstrings ("LEN:BYTES,") one after another --------------------------------------- */
typedef struct { char *at, *end; } Reader;

/* The next netstring's bytes, NUL-terminated in place (its ',' overwritten); NULL when malformed. */
static char *next_item(Reader *in, size_t *len) {
    size_t n = 0;
    int digits = 0;
    while (in->at < in->end && *in->at >= '0' && *in->at <= '9' && digits < 9) {
        n = n * 10 + (size_t)(*in->at++ - '0');
        digits++;
    }
    if (!digits || in->at >= in->end || *in->at != ':' || (size_t)(in->end - in->at) < n + 2) return NULL;
    char *item = in->at + 1;
    if (item[n] != ',') return NULL;
    item[n] = '\0';
    in->at = item + n + 1;
    *len = n;
    return item;
}

/* The next item as text without NUL bytes (a path, a name): NULL otherwise. */
static char *next_text(Reader *in) {
    size_t len;
    char *item = next_item(in, &len);
    return item && strlen(item) == len ? item : NULL;
}

static long next_count(Reader *in) {
    char *item = next_text(in);
    if (!item || !*item || strlen(item) > 6 || strspn(item, "0123456789") != strlen(item)) return -1;
    return strtol(item, NULL, 10);
}

/* --- the facts: each answer rendered as envbuild/launch/repeatplan.py renders Python's ----------------- */
static int errno_answer(Bytes *out, int error) { put_format(out, "e%lld", error); return 1; }

static int stat_answer(Bytes *out, const char *path, int follow) {
    struct stat status;
    if ((follow ? stat(path, &status) : lstat(path, &status)) != 0) return errno_answer(out, errno);
    put_format(out, "s%lld", (long long)status.st_mode);
    put_format(out, " %lld", (long long)status.st_uid);
    put_format(out, " %lld", (long long)status.st_gid);
    char number[64];
    snprintf(number, sizeof number, " %llu", (unsigned long long)status.st_dev);
    put_text(out, number);
    snprintf(number, sizeof number, " %llu", (unsigned long long)status.st_ino);
    put_text(out, number);
    if (S_ISDIR(status.st_mode)) return 1;  /* a directory's size and times are no fact (plancache.signature) */
    put_format(out, " %lld", (long long)status.st_size);
    put_format(out, " %lld", (long long)status.st_mtim.tv_sec * 1000000000LL + status.st_mtim.tv_nsec);
    put_format(out, " %lld", (long long)status.st_ctim.tv_sec * 1000000000LL + status.st_ctim.tv_nsec);
    return 1;
}

static int by_bytes(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void put_sorted(Bytes *out, char **names, size_t count) {  /* bytewise order, NUL between */
    qsort(names, count, sizeof *names, by_bytes);
    for (size_t i = 0; i < count; i++) {
        if (i) put(out, "", 1);
        put_text(out, names[i]);
    }
}

static int listdir_answer(Bytes *out, const char *path) {
    DIR *dir = opendir(path);
    if (!dir) return errno_answer(out, errno);
    char **names = NULL;
    size_t count = 0;
    struct dirent *entry;
    errno = 0;
    while ((entry = readdir(dir))) {
        if (!strcmp(entry->d_name, ".") || !strcmp(entry->d_name, "..")) continue;
        names = grown(names, (count + 1) * sizeof *names);
        names[count] = strdup(entry->d_name);
        if (!names[count++]) fall_back();
    }
    int failed = errno;
    closedir(dir);
    if (failed) return 0;  /* a listing cut short: no answer */
    put_text(out, "l");
    put_sorted(out, names, count);
    return 1;
}

static int readlink_answer(Bytes *out, const char *path) {
    for (size_t size = 256;; size *= 2) {
        char *target = grown(NULL, size);
        ssize_t len = readlink(path, target, size);
        if (len < 0) return errno_answer(out, errno);
        if ((size_t)len < size) {
            put_text(out, "l");
            put(out, target, (size_t)len);
            return 1;
        }
        free(target);
        if (size > (1u << 20)) return 0;
    }
}

static int content_answer(Bytes *out, const char *path) {  /* a kernel pseudo file: (crc32, length) */
    int handle = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (handle < 0) return errno_answer(out, errno ? errno : -1);
    Bytes data = {0};
    char chunk[1 << 16];
    for (;;) {
        ssize_t got = read(handle, chunk, sizeof chunk);
        if (got < 0) {
            int error = errno;
            close(handle);
            return errno_answer(out, error ? error : -1);
        }
        if (!got) break;
        put(&data, chunk, (size_t)got);
    }
    close(handle);
    char rendered[64];
    snprintf(rendered, sizeof rendered, "c%lu %zu", (unsigned long)crc32_of(data.data ? data.data : "", data.len),
             data.len);
    put_text(out, rendered);
    return 1;
}

static int affinity_answer(Bytes *out) {
    for (size_t cpus = 1024; cpus <= (1u << 20); cpus *= 2) {
        cpu_set_t *set = CPU_ALLOC(cpus);
        if (!set) return 0;
        size_t size = CPU_ALLOC_SIZE(cpus);
        if (sched_getaffinity(0, size, set) == 0) {
            int first = 1;
            for (size_t cpu = 0; cpu < size * 8; cpu++) {
                if (!CPU_ISSET_S(cpu, size, set)) continue;
                put_format(out, first ? "%lld" : ",%lld", (long long)cpu);
                first = 0;
            }
            CPU_FREE(set);
            return 1;
        }
        CPU_FREE(set);
        if (errno != EINVAL) return 0;
    }
    return 0;
}

static int uname_answer(Bytes *out) {
    struct utsname host;
    if (uname(&host) != 0) return 0;
    const char *fields[] = {host.sysname, host.nodename, host.release, host.version, host.machine};
    for (int i = 0; i < 5; i++) {
        if (i) put(out, "", 1);
        put_text(out, fields[i]);
    }
    return 1;
}

/* The environment as Python's os.environ holds it, when it can: every entry NAME=VALUE with a non-empty
   NAME, no NAME twice (Python and getenv would agree on the first, but a doubt is a miss). */
static int environment_names(char ***names, size_t *count) {
    size_t n = 0;
    while (environ[n]) n++;
    char **found = grown(NULL, (n + 1) * sizeof *found);
    for (size_t i = 0; i < n; i++) {
        const char *equals = strchr(environ[i], '=');
        if (!equals || equals == environ[i]) return 0;
        found[i] = strndup(environ[i], (size_t)(equals - environ[i]));
        if (!found[i]) return 0;
    }
    qsort(found, n, sizeof *found, by_bytes);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(found[i - 1], found[i])) return 0;
    *names = found;
    *count = n;
    return 1;
}

/* Whether the fact at `in` (its kind already read) holds now; 0 also when it cannot be asked. */
static int fact_holds(Reader *in, const char *kind) {
    Bytes now = {0};
    fact_subject = "";
    int asked;
    if (!strcmp(kind, "env")) {
        const char *name = fact_subject = next_text(in);
        if (!name) return 0;
        const char *value = getenv(name);
        asked = 1;
        if (value) {
            put_text(&now, "=");
            put_text(&now, value);
        } else {
            put_text(&now, "-");
        }
    } else if (!strcmp(kind, "stat") || !strcmp(kind, "lstat")) {
        const char *path = fact_subject = next_text(in);
        if (!path) return 0;
        asked = stat_answer(&now, path, kind[0] == 's');
    } else if (!strcmp(kind, "access")) {
        const char *path = fact_subject = next_text(in);
        long mode = next_count(in);
        if (!path || mode < 0 || mode > 7) return 0;
        asked = 1;
        put_text(&now, access(path, (int)mode) == 0 ? "1" : "0");
    } else if (!strcmp(kind, "listdir")) {
        const char *path = fact_subject = next_text(in);
        if (!path) return 0;
        asked = listdir_answer(&now, path);
    } else if (!strcmp(kind, "readlink")) {
        const char *path = fact_subject = next_text(in);
        if (!path) return 0;
        asked = readlink_answer(&now, path);
    } else if (!strcmp(kind, "content")) {
        const char *path = fact_subject = next_text(in);
        if (!path) return 0;
        asked = content_answer(&now, path);
    } else if (!strcmp(kind, "names")) {
        char **names;
        size_t count;
        asked = environment_names(&names, &count);
        if (asked) put_sorted(&now, names, count);
    } else if (!strcmp(kind, "affinity")) {
        asked = affinity_answer(&now);
    } else if (!strcmp(kind, "uname")) {
        asked = uname_answer(&now);
    } else if (!strcmp(kind, "cpu_count")) {
        long count = sysconf(_SC_NPROCESSORS_ONLN);  /* what os.cpu_count() asks on Linux */
        asked = 1;
        if (count >= 1) put_format(&now, "%lld", count);
        else put_text(&now, "none");
    } else {
        return 0;  /* a kind this program does not know */
    }
    size_t len;
    char *recorded = next_item(in, &len);
    return asked && recorded && len == now.len && !memcmp(recorded, now.data ? now.data : "", len);
}

/* --- the key and the file ------------------------------------------------------------------------------ */
static int plans_kept(void) {  /* as plancache.plans_kept */
    const char *job = getenv("SLURM_JOB_ID"), *job_old = getenv("SLURM_JOBID"), *kept = getenv("ENVRUN_PLAN_CACHE");
    if ((job && *job) || (job_old && *job_old)) return 0;
    if (!kept) return 1;
    const char *off[] = {"0", "off", "no", "false"};
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(kept, off[i])) return 0;
    return 1;
}

static int private_status(const struct stat *status, int directory) {  /* as usercache._private */
    if ((status->st_mode & S_IFMT) != (directory ? S_IFDIR : S_IFREG)) return 0;
    return status->st_uid == geteuid() && !(status->st_mode & 022);
}

/* The bytes of the plan file `name` in the user's cache ($XDG_CACHE_HOME/envrun, else $HOME/.cache/envrun). */
static int read_plan(const char *name, Bytes *out) {
    const char *base = getenv("XDG_CACHE_HOME");
    Bytes path = {0};
    if (base && base[0] == '/') {
        put_text(&path, base);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) return 0;  /* Python would ask the password database: a miss here */
        put_text(&path, home);
        put_text(&path, "/.cache");
    }
    put_text(&path, "/envrun");
    int directory = open(path.data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory < 0) return 0;
    struct stat status;
    if (fstat(directory, &status) != 0 || !private_status(&status, 1)) {
        close(directory);
        return 0;
    }
    int handle = openat(directory, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    close(directory);
    if (handle < 0) return 0;
    if (fstat(handle, &status) != 0 || !private_status(&status, 0) || status.st_size > LIMIT) {
        close(handle);
        return 0;
    }
    char chunk[1 << 16];
    for (;;) {
        ssize_t got = read(handle, chunk, sizeof chunk);
        if (got < 0 || out->len + (size_t)(got > 0 ? got : 0) > (size_t)LIMIT) {
            close(handle);
            return 0;
        }
        if (!got) break;
        put(out, chunk, (size_t)got);
    }
    close(handle);
    return out->len > 0;
}

/* bin/envrun's Python program puts the checkout (the launcher's directory's parent) first on $PYTHONPATH
   before anything reads the environment, so the facts were recorded, and the plan is exec'd, with it there:
   the same here, in a copy of the environment that the Python launch never sees. */
static void take_launcher_environment(const char *self_real) {
    const char *slash = strrchr(self_real, '/');
    size_t here_len = slash ? (size_t)(slash - self_real) : 0;
    while (here_len && self_real[here_len - 1] == '/') here_len--;
    while (here_len && self_real[here_len - 1] != '/') here_len--;  /* dirname(dirname(path)) */
    while (here_len > 1 && self_real[here_len - 1] == '/') here_len--;
    if (!here_len) fall_back();
    const char *old = getenv("PYTHONPATH");
    Bytes entry = {0};
    put_text(&entry, "PYTHONPATH=");
    put(&entry, self_real, here_len);
    if (old && *old) {
        put_text(&entry, ":");
        put_text(&entry, old);
    }
    size_t n = 0;
    while (environ[n]) n++;
    char **copy = grown(NULL, (n + 2) * sizeof *copy);
    size_t kept = 0;
    int replaced = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strncmp(environ[i], "PYTHONPATH=", 11)) {
            if (replaced) continue;
            copy[kept++] = entry.data;
            replaced = 1;
        } else {
            copy[kept++] = environ[i];
        }
    }
    if (!replaced) copy[kept++] = entry.data;
    copy[kept] = NULL;
    original_environ = environ;
    environ = copy;
}

static int in_list(char **list, long count, const char *name, size_t len) {
    for (long i = 0; i < count; i++)
        if (strlen(list[i]) == len && !memcmp(list[i], name, len)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    char *end = NULL;
    long words = argc > 2 ? strtol(argv[2], &end, 10) : 0;
    if (argc < 3 || !end || *end || words < 1 || words > argc - 3) {
        fprintf(stderr, "usage: envrun-repeat SELF N FALLBACK_1 .. FALLBACK_N ARGS... (bin/envrun runs it)\n");
        return 2;
    }
    fallback_argv = argv + 3;  /* FALLBACK words, then the user's: argv's own NULL ends them */
    tracing = getenv("ENVRUN_REPEAT_TRACE") != NULL;
    char **user = argv + 3 + words;
    int user_count = argc - 3 - (int)words;
    if (!plans_kept()) fall_back();

    /* The key (repeatplan.repeat_key): format, this launcher's canonical path, user, directory, arguments. */
    char *self = realpath(argv[1], NULL);
    char *cwd = getcwd(NULL, 0);
    if (!self || !cwd) fall_back();
    take_launcher_environment(self);
    Bytes key = {0};
    put_text(&key, "1");
    put(&key, "", 1);
    put_text(&key, self);
    put(&key, "", 1);
    put_format(&key, "%lld", (long long)geteuid());
    put(&key, "", 1);
    put_text(&key, cwd);
    for (int i = 0; i < user_count; i++) {
        put(&key, "", 1);
        put_text(&key, user[i]);
    }
    char name[64];
    snprintf(name, sizeof name, "repeat-%02x.plan", (unsigned)(crc32_of(key.data, key.len) % SLOTS));
    Bytes file = {0};
    if (!read_plan(name, &file)) fall_back();

    Reader in = {file.data, file.data + file.len};
    size_t len;
    char *item = next_item(&in, &len);
    if (!item || len != strlen(MAGIC) || memcmp(item, MAGIC, len)) fall_back();
    item = next_item(&in, &len);
    if (!item || len != key.len || memcmp(item, key.data, len)) fall_back();  /* another key in this slot */
    long facts = next_count(&in);
    if (facts < 0) fall_back();
    for (long i = 0; i < facts; i++) {
        char *kind = next_text(&in);
        if (!kind || !fact_holds(&in, kind)) {
            missed_fact = kind ? kind : "malformed";
            fall_back();
        }
    }
    /* the plan: argv, the variables unset, the variables set (NAME, VALUE pairs), the warnings */
    long count = next_count(&in);
    if (count < 1) fall_back();
    char **plan_argv = grown(NULL, (size_t)(count + 1) * sizeof *plan_argv);
    for (long i = 0; i < count; i++)
        if (!(plan_argv[i] = next_text(&in))) fall_back();
    plan_argv[count] = NULL;
    long unset_count = next_count(&in);
    if (unset_count < 0) fall_back();
    char **unset = grown(NULL, (size_t)unset_count * sizeof *unset);
    for (long i = 0; i < unset_count; i++)
        if (!(unset[i] = next_text(&in))) fall_back();
    long set_count = next_count(&in);
    if (set_count < 0) fall_back();
    char **set_names = grown(NULL, (size_t)set_count * sizeof *set_names);
    char **set_values = grown(NULL, (size_t)set_count * sizeof *set_values);
    for (long i = 0; i < set_count; i++)
        if (!(set_names[i] = next_text(&in)) || !*set_names[i] || strchr(set_names[i], '=')
            || !(set_values[i] = next_text(&in)))
            fall_back();
    long warning_count = next_count(&in);
    if (warning_count < 0) fall_back();
    Bytes warnings = {0};
    for (long i = 0; i < warning_count; i++) {
        char *warning = next_text(&in);
        if (!warning) fall_back();
        put_text(&warnings, "envrun: warning: ");
        put_text(&warnings, warning);
        put_text(&warnings, "\n");
    }
    if (in.at != in.end) fall_back();

    /* The program's environment (plancache.environment_for): this one less `unset` and the names set, then
       the variables set. Where the environment is not one Python reads alike, Python launches. */
    char **names;
    size_t name_count;
    if (!environment_names(&names, &name_count)) fall_back();
    char **env = grown(NULL, (name_count + (size_t)set_count + 1) * sizeof *env);
    size_t kept = 0;
    for (char **entry = environ; *entry; entry++) {
        size_t name_len = (size_t)(strchr(*entry, '=') - *entry);
        if (!in_list(unset, unset_count, *entry, name_len) && !in_list(set_names, set_count, *entry, name_len))
            env[kept++] = *entry;
    }
    for (long i = 0; i < set_count; i++) {
        Bytes pair = {0};
        put_text(&pair, set_names[i]);
        put_text(&pair, "=");
        put_text(&pair, set_values[i]);
        env[kept++] = pair.data;
    }
    env[kept] = NULL;

    if (warnings.len && write(STDERR_FILENO, warnings.data, warnings.len) < 0) fall_back();
    /* os.execvpe: a name with a slash as it is, else each directory of the new environment's PATH in turn
       (os.defpath where it has none; an empty entry is the working directory). */
    if (strchr(plan_argv[0], '/')) {
        execve(plan_argv[0], plan_argv, env);
    } else {
        const char *search = in_list(unset, unset_count, "PATH", 4) ? NULL : getenv("PATH");
        for (long i = 0; i < set_count; i++)
            if (!strcmp(set_names[i], "PATH")) search = set_values[i];
        if (!search) search = "/bin:/usr/bin";
        for (const char *dir = search;; dir = strchr(dir, ':') + 1) {
            size_t dir_len = strcspn(dir, ":");
            Bytes program = {0};
            if (dir_len) {
                put(&program, dir, dir_len);
                put_text(&program, "/");
            }
            put_text(&program, plan_argv[0]);
            execve(program.data, plan_argv, env);
            if (!dir[dir_len]) break;
        }
    }
    fall_back();  /* the program could not be started: Python plans, and says why */
}
