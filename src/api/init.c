/* Process and thread life cycle: one-time set-up (which may run from the dynamic
 * loader, a constructor, or recursively from a call it makes), the thread-exit hook,
 * fork handlers and the exit report. */

#include "api/api.h"

#include <sched.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Atomic long init_thread;
pthread_key_t thread_key;
bool thread_key_ready;

static void thread_exit(void *arg) {
  hak_heap_t *h = arg;
  heap_user_thread_exit(h); /* its user heaps go into its heap first */
  if (HAKMEM_SECURE && h != NULL && h != &empty_heap) secure_quarantine_flush(h, true);
  heap_abandon(h);
  if (atomic_load_explicit(&prof_ever_on, memory_order_relaxed)) prof_unwind_thread_exit();
}

/* The locks, in their order (lock_order.c); the forking thread's own heap lock too,
 * which the purge thread may hold while it trims that heap. The profiler's handlers,
 * registered later, take prof_lock before these. */
static void fork_prepare(void) {
  pthread_mutex_lock(&heaps_lock);
  if (tls_heap != &empty_heap) pthread_mutex_lock(&tls_heap->lock);
  pthread_mutex_lock(&region_lock);
  checkers_atfork(true);
}

static void fork_parent(void) {
  checkers_atfork(false);
  pthread_mutex_unlock(&region_lock);
  if (tls_heap != &empty_heap) pthread_mutex_unlock(&tls_heap->lock);
  pthread_mutex_unlock(&heaps_lock);
}

static void fork_child(void) {
  checkers_atfork(false);
  pthread_mutex_init(&region_lock, NULL);
  if (tls_heap != &empty_heap) pthread_mutex_init(&tls_heap->lock, NULL);
  pthread_mutex_init(&heaps_lock, NULL);
  heap_atfork_child();
  heap_user_atfork_child();
  purge_thread_atfork_child();
}

static uintptr_t random_word(void) {
  uintptr_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != sizeof v) {
    struct timespec t = os_monotonic_after(0); /* a weaker mix, where getrandom fails */
    v = ((uintptr_t)t.tv_sec << 30 ^ (uintptr_t)t.tv_nsec) ^ (uintptr_t)&v ^ ((uintptr_t)getpid() << 17);
  }
  return v | 1; /* never zero, so a zeroed word is never a valid free tag */
}

void init_process(void) {
  if (HAK_LIKELY(atomic_load_explicit(&init_state, memory_order_acquire) == 2)) return;
  long me = (long)syscall(SYS_gettid);
  int expected = 0;
  if (!atomic_compare_exchange_strong(&init_state, &expected, 1)) {
    /* Someone else is initialising. If it is us (a recursive call from the set-up
     * below), the core is already usable; otherwise wait for them. */
    if (atomic_load(&init_thread) == me) return;
    while (atomic_load_explicit(&init_state, memory_order_acquire) != 2) sched_yield();
    return;
  }
  atomic_store(&init_thread, me);
  checkers_at_start(); /* before any call a sanitizer intercepts */
  options_init();
  /* A report at exit: keep the stderr the process started with (options_report.c). */
  if (HAK_UNLIKELY(opt.stats || opt.stats_json)) options_keep_stderr();
  limit_reclaim = heap_limit_reclaim; /* near a memory limit, heaps give back */
  /* The switch stays as set; limit.soft says what it found. */
  if (opt.limit_from_cgroup) limit_from_cgroup();
  size_class_init();
  process_cookie = random_word();
  list_key = random_word();
  tag_key = random_word();
  if (HAKMEM_SECURE) secure_init();
  /* Both calls may allocate; they find the core ready and this thread's heap made. */
  if (pthread_key_create(&thread_key, thread_exit) == 0) thread_key_ready = true;
  os_atfork(fork_prepare, fork_parent, fork_child);
  atomic_store_explicit(&init_state, 2, memory_order_release);
}

__attribute__((constructor)) static void init_constructor(void) {
  heap_get();
  if (tls_heap == &empty_heap) return;
  if (thread_key_ready) pthread_setspecific(thread_key, tls_heap);
  /* Loaded by the main thread (preloaded, or linked): see heap_mark_main. */
  if (syscall(SYS_gettid) == syscall(SYS_getpid)) heap_mark_main(tls_heap);
  if (opt.prof) prof_init(); /* after the thread's heap and the fork handlers */
}

/* The shared library's DT_FINI (CMakeLists.txt: -fini), in the hot code. */
void init_fini(void);
void init_fini(void) {}

__attribute__((destructor)) static void init_destructor(void) {
  /* The exit profile and leak report, before the statistics. */
  if (atomic_load_explicit(&prof_ever_on, memory_order_relaxed)) prof_exit();
  if (opt.stats) stats_print_at_exit();
}
