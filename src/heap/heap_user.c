/* User heaps: heaps a program makes with hak_heap_new, allocates from, and drops whole.
 *
 * A user heap is one more hak_heap_t, owned by the thread that made it: only that thread
 * allocates from it, destroys or releases it. Its slabs' owner words name the thread's
 * own heap (owner_id), so that thread frees their blocks on free's fast path like its
 * own; `user_heap` in each descriptor names the user heap, for the slow paths that
 * change its lists. Other threads' frees go through the remote chains as usual.
 *
 * Destroying frees everything at once: big blocks one by one, slabs whole (their owner
 * words go to OWNER_NONE first, so a late free is reported), then the spans go back to
 * their regions. Frees made before the destruction may still wait in other threads'
 * remote chains (or, hardened, quarantines): each such chain holds a reference on the
 * heap (heap_user_hold), and a heap destroyed while referenced waits, slabs and all, on
 * the retired list until the last reference goes; heap_user_sweep finishes it then.
 * Releasing hands every slab to the thread's own heap instead: the blocks live on.
 *
 * A thread that exits releases its user heaps. A forked child keeps the forking
 * thread's. Everything here runs on the owner's slow paths, never on a fast path. */

#include "heap/heap.h"

/* Every live user heap, and the retired ones waiting for their references; under
 * heaps_lock, linked by user_next/user_prev. */
static hak_heap_t *users_live, *users_retired;

/* The heap hak_heap_malloc last found to be the calling thread's (heap_api.c); the
 * empty heap, not NULL, when there is none, so that a NULL handle is never taken for
 * it. */
__thread hak_heap_t *heap_tls_last __attribute__((tls_model("initial-exec"))) = &empty_heap;

static void user_link(hak_heap_t **list, hak_heap_t *u) {
  u->user_prev = NULL;
  u->user_next = *list;
  if (*list) (*list)->user_prev = u;
  *list = u;
}

static void user_unlink(hak_heap_t **list, hak_heap_t *u) {
  if (u->user_prev) u->user_prev->user_next = u->user_next;
  else *list = u->user_next;
  if (u->user_next) u->user_next->user_prev = u->user_prev;
  u->user_next = u->user_prev = NULL;
}

/* ---- the retired list ------------------------------------------------------------- */
/* The slabs of destroyed heap u, no reference left, go back to their regions
 * (hardened: to heap_dead.c's queue). Returns their bytes. */
static size_t slabs_gone(hak_heap_t *u) {
  uint64_t now = os_now_ms();
  size_t bytes = 0, n = 0;
  bool first = true;
  slab_t *batch[HAKMEM_SECURE ? DEAD_BATCH : 1];
  if (!HAKMEM_SECURE) pthread_mutex_lock(&region_lock);
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    slab_queue_t *lists[2] = {&u->queue[c], &u->full[c]};
    for (int l = 0; l < 2; l++) {
      slab_t *s;
      while ((s = lists[l]->head) != NULL) {
        queue_remove(lists[l], s);
        if (HAKMEM_SECURE) {
          batch[n++] = s;
          if (n == DEAD_BATCH) bytes += heap_dead_add(batch, n, first, now), n = 0, first = false;
        } else {
          bytes += (size_t)s->units * UNIT_SIZE;
          span_free(s, now);
        }
      }
    }
  }
  if (!HAKMEM_SECURE) pthread_mutex_unlock(&region_lock);
  if (HAKMEM_SECURE && n > 0) bytes += heap_dead_add(batch, n, first, now);
  return bytes;
}

/* u is retired and no reference is left: a destroyed heap's slabs go, and the
 * structure to the pool (hardened: never reused). */
static void user_finish(hak_heap_t *u) {
  if (u->retired_how == HEAP_DESTROYED) heap_held_add(u, -slabs_gone(u));
  if (HAKMEM_SECURE) heap_slot_bury(u);
  else heap_struct_free(u);
}

/* Finishes the retired heaps that no reference holds any more. */
void heap_user_sweep(void) {
  hak_heap_t *done = NULL;
  pthread_mutex_lock(&heaps_lock);
  for (hak_heap_t *u = users_retired, *next; u != NULL; u = next) {
    next = u->user_next;
    if (atomic_load_explicit(&u->refs, memory_order_acquire) == HEAP_REFS_RETIRED) {
      user_unlink(&users_retired, u);
      u->user_next = done;
      done = u;
    }
  }
  pthread_mutex_unlock(&heaps_lock);
  while (done != NULL) {
    hak_heap_t *u = done;
    done = u->user_next;
    user_finish(u);
  }
}

/* u leaves the heaps its thread can use and the list of all heaps (no statistics walk
 * or idle reclaim reads it again), and its handle reads as destroyed. */
static void user_unpublish(hak_heap_t *u, uint32_t how) {
  if (tls_alloc == u) tls_alloc = tls_heap;
  if (heap_tls_last == u) heap_tls_last = &empty_heap;
  pthread_mutex_lock(&heaps_lock);
  heap_unlist_locked(u);
  user_unlink(&users_live, u);
  heap_slot_set_state(u, HEAP_SLOT_DEAD);
  u->kind = HEAP_KIND_RETIRED;
  u->retired_how = how;
  pthread_mutex_unlock(&heaps_lock);
}

/* From now on no reference on u can be taken, and the holders of one see that it is
 * gone (heap_user_destroyed). Returns how many there were. */
static uint64_t user_close(hak_heap_t *u) {
  uint64_t old = atomic_fetch_or_explicit(&u->refs, HEAP_REFS_RETIRED, memory_order_seq_cst);
  return old & ~HEAP_REFS_RETIRED;
}

/* The last step of destroy and release (after user_close said how many references
 * there were): u is finished now, or when the last one goes. */
static void user_retire(hak_heap_t *u, uint64_t refs) {
  if (refs == 0) {
    user_finish(u);
  } else {
    pthread_mutex_lock(&heaps_lock);
    user_link(&users_retired, u);
    pthread_mutex_unlock(&heaps_lock);
  }
  heap_user_sweep();
}

/* Hardened: the blocks of u that the caller freed wait in its own quarantine with a
 * reference each; they go with u now rather than hold it on the retired list. */
static void quarantine_forget(hak_heap_t *home, hak_heap_t *u) {
  for (uint32_t i = 0; HAKMEM_SECURE && i < QUARANTINE_SLOTS; i++) {
    if (home->quarantine_user[i] != u) continue;
    block_t *q = home->quarantine[i];
    if (q != NULL) home->quarantine_bytes -= region_slab_of((uintptr_t)q)->block_size;
    __atomic_store_n(&home->quarantine[i], NULL, __ATOMIC_RELAXED); /* heap_walk reads it */
    home->quarantine_user[i] = NULL;
    heap_user_unref(u);
  }
}

/* ---- the spare: a destroyed heap's slabs for the thread's next heap ----------------
 * A program that makes a heap per request would otherwise take every slab of every
 * request's heap from the regions and give it back (region searches, most of the cost).
 * So a destroyed heap that nothing references stays with its thread, its slabs reset
 * (nothing carved, nothing out: O(1) each), up to SPARE_MAX_UNITS, and the thread's next
 * heap is that structure with those slabs. Unused, they go back after the purge delay
 * (heap_spare_trim, from the thread's deferred work), and at thread exit. Meanwhile their
 * owner words stay OWNER_NONE: a late free is reported as after any destruction. */
#define SPARE_MAX_UNITS 256 /* 16 MiB */

static void slab_reset(slab_t *s) {
  s->free = s->local_free = NULL;
  s->capacity = 0;
  tso_store(&s->carved_magic, 0);
  s->used_ticks = 0;
  s->aux = 0;
  atomic_store_explicit(&s->remote, 0, memory_order_relaxed); /* frees of gone blocks */
}

/* Queues s among a class's kept slabs, those that have written the most pages first:
 * the next heap fills the first slab of a class before it takes the next, so it
 * carves again where pages are resident already, and the pages the slabs hold stay
 * those of the class's highest count of live blocks. In the order they came, a slab
 * that had filled first (and gone to the full list) would come last, and each slab
 * would in time write as many pages as the first. */
static void spare_queue(slab_queue_t *q, slab_t *s) {
  slab_t *after = q->tail; /* most classes keep one slab: it goes at the back */
  while (after != NULL && after->touched < s->touched) after = after->prev;
  queue_insert_after(q, after, s);
}

/* Keeps destroyed heap u, which no reference holds, as home's spare. */
static bool spare_keep(hak_heap_t *home, hak_heap_t *u) {
  if (HAKMEM_SECURE || opt.purge_delay_ms == 0) return false;
  uint64_t now = os_now_ms();
  if (home->spare != NULL) {
    heap_spare_trim(home, now, true);
    heap_struct_free(home->spare);
  }
  size_t kept = 0, gone = 0;
  pthread_mutex_lock(&region_lock);
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    slab_queue_t keep = {0};
    for (int l = 0; l < 2; l++) {
      slab_queue_t *q = l ? &u->full[c] : &u->queue[c];
      for (slab_t *s; (s = q->head) != NULL;) {
        queue_remove(q, s);
        if (kept + s->units <= SPARE_MAX_UNITS) {
          kept += s->units;
          slab_reset(s);
          spare_queue(&keep, s);
        } else {
          gone += s->units;
          span_free(s, now);
        }
      }
    }
    u->queue[c] = keep;
  }
  pthread_mutex_unlock(&region_lock);
  heap_held_add(u, -gone * UNIT_SIZE);
  u->spare_ms = now;
  home->spare = u;
  return true;
}

/* The spare comes back to life as a new heap: a new generation, its slabs its own. */
static hak_heap_t *spare_revive(hak_heap_t *home) {
  hak_heap_t *u = home->spare;
  home->spare = NULL;
  uint32_t gen = atomic_fetch_add_explicit(&u->gen, 1, memory_order_relaxed) + 1;
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    for (slab_t *s = u->queue[c].head; s != NULL; s = s->next) {
      __atomic_store_n(&s->user_gen, gen, __ATOMIC_RELAXED);
      __atomic_store_n(&s->owner, (uintptr_t)home, __ATOMIC_RELEASE);
    }
    if (u->queue[c].head != NULL) heap_head_changed(u, c);
  }
  u->retired_how = 0;
  u->spare_ms = 0;
  u->peak_held = atomic_load_explicit(&u->held, memory_order_relaxed);
  pthread_mutex_lock(&heaps_lock); /* back on the list of all heaps */
  u->kind = HEAP_KIND_USER;
  u->all_prev = NULL;
  u->all_next = heaps_all;
  if (heaps_all) heaps_all->all_prev = u;
  heaps_all = u;
  pthread_mutex_unlock(&heaps_lock);
  return u;
}

/* Hardened: new heap u takes the slabs of heaps destroyed long enough ago
 * (heap_dead.c), zero and resident, for their classes, as a spare's. */
static void dead_adopt(hak_heap_t *home, hak_heap_t *u) {
  slab_t *list = HAKMEM_SECURE ? heap_dead_reuse(SPARE_MAX_UNITS) : NULL;
  if (list == NULL) return;
  uint32_t gen = atomic_load_explicit(&u->gen, memory_order_relaxed);
  size_t bytes = 0;
  pthread_mutex_lock(&u->lock); /* on the list of all heaps already: walkers take it */
  while (list != NULL) {
    slab_t *s = list;
    list = s->next;
    slab_reset(s);
    bytes += (size_t)s->units * UNIT_SIZE;
    spare_queue(&u->queue[s->class_idx], s);
    __atomic_store_n(&s->user_gen, gen, __ATOMIC_RELAXED);
    __atomic_store_n(&s->user_heap, u, __ATOMIC_RELAXED);
    __atomic_store_n(&s->owner, (uintptr_t)home, __ATOMIC_RELEASE);
  }
  for (uint32_t c = 0; c < NUM_CLASSES; c++)
    if (u->queue[c].head != NULL) heap_head_changed(u, c);
  pthread_mutex_unlock(&u->lock);
  heap_held_grow(u, bytes);
}

/* ---- life cycle ------------------------------------------------------------------- */
hak_heap_t *heap_user_new(void) {
  hak_heap_t *home = heap_get();
  if (home == NULL) return NULL;
  heap_user_sweep();
  hak_heap_t *u;
  if (home->spare != NULL) {
    u = spare_revive(home);
  } else {
    u = heap_struct_alloc();
    if (u == NULL) return NULL;
    for (size_t i = 0; i < ALL_DIRECT_SLOTS; i++) u->direct[i] = &empty_slab;
    atomic_fetch_add_explicit(&u->gen, 1, memory_order_relaxed); /* a new generation */
    if (HAKMEM_SECURE) dead_adopt(home, u);
  }
  __atomic_store_n(&u->owner_id, (uintptr_t)home, __ATOMIC_RELAXED);
  atomic_fetch_and_explicit(&u->refs, ~HEAP_REFS_RETIRED, memory_order_relaxed);
  pthread_mutex_lock(&heaps_lock); /* (idle reclaim reads the kind under it) */
  u->kind = HEAP_KIND_USER;
  heap_slot_set_state(u, HEAP_SLOT_USER);
  user_link(&users_live, u);
  pthread_mutex_unlock(&heaps_lock);
  return u;
}

void heap_user_destroy(hak_heap_t *u) {
  hak_heap_t *home = tls_heap;
  user_unpublish(u, HEAP_DESTROYED);
  if (HAKMEM_SECURE) quarantine_forget(home, u);
  /* Closed before anything is taken down: a block in a quarantine, freed before, must
   * see that it went with its heap rather than find its slab half gone. */
  uint64_t refs = user_close(u);
  slab_t *large = NULL;
  pthread_mutex_lock(&u->lock);
  /* Big blocks: huge ones freed here; large ones taken off the list (a free racing
   * with this finds it empty), then freed below, where the loser of a race says so. */
  if (u->huge != NULL) huge_heap_drop_all(u, true); /* huge.c is cold code: not called idly */
  for (slab_t *s; (s = u->large.head) != NULL;) {
    queue_remove(&u->large, s);
    __atomic_store_n(&s->user_heap, NULL, __ATOMIC_RELEASE);
    heap_held_add(u, -(size_t)s->units * UNIT_SIZE);
    s->next = large;
    large = s;
  }
  /* Slabs: no live block any more. A late free finds no owner and is reported. */
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    u->pinned[c] = NULL;
    for (int l = 0; l < 2; l++)
      for (slab_t *s = (l ? u->full : u->queue)[c].head; s != NULL; s = s->next)
        __atomic_store_n(&s->owner, OWNER_NONE, __ATOMIC_RELEASE);
  }
  for (size_t i = 0; i < ALL_DIRECT_SLOTS; i++) u->direct[i] = &empty_slab;
  pthread_mutex_unlock(&u->lock);
  while (large != NULL) {
    slab_t *s = large;
    large = s->next;
    s->next = NULL;
    large_free(s, (void *)s->start);
  }
  __atomic_store_n(&u->owner_id, 0, __ATOMIC_RELAXED);
  if (refs == 0 && spare_keep(home, u)) return; /* its slabs, for the next heap */
  span_cache_flush(u, os_now_ms(), -1);
  user_retire(u, refs);
}

/* Two heap locks at once: the lower address first (the lock order, lock_order.c). */
static void lock_both(hak_heap_t *a, hak_heap_t *b) {
  if ((uintptr_t)a > (uintptr_t)b) {
    hak_heap_t *t = a;
    a = b;
    b = t;
  }
  pthread_mutex_lock(&a->lock);
  pthread_mutex_lock(&b->lock);
}

/* Every slab of u goes to the thread's own heap, whose address its owner word already
 * holds; big blocks become the process's. */
void heap_user_release(hak_heap_t *u) {
  hak_heap_t *home = tls_heap;
  user_unpublish(u, HEAP_RELEASED);
  lock_both(u, home);
  for (uint32_t c = 0; c < NUM_CLASSES; c++) {
    heap_unpin(u, c);
    for (int l = 0; l < 2; l++) {
      slab_queue_t *from = l ? &u->full[c] : &u->queue[c];
      for (slab_t *s; (s = from->head) != NULL;) {
        queue_remove(from, s);
        __atomic_store_n(&s->user_heap, NULL, __ATOMIC_RELEASE);
        if (l == 1) {
          queue_push_back(&home->full[c], s);
          continue;
        }
        slab_collect(s);
        if (s->used == 0) heap_release_slab(home, s);
        else queue_push_back(&home->queue[c], s);
      }
    }
    heap_head_changed(home, c);
  }
  home->stale_classes |= u->stale_classes;
  for (slab_t *s; (s = u->large.head) != NULL;) {
    queue_remove(&u->large, s);
    __atomic_store_n(&s->user_heap, NULL, __ATOMIC_RELEASE);
  }
  if (u->huge != NULL) huge_heap_drop_all(u, false);
  pthread_mutex_unlock(&home->lock);
  for (size_t i = 0; i < ALL_DIRECT_SLOTS; i++) u->direct[i] = &empty_slab;
  pthread_mutex_unlock(&u->lock);
  span_cache_flush(u, os_now_ms(), -1);
  atomic_store_explicit(&u->held, 0, memory_order_relaxed);
  __atomic_store_n(&u->owner_id, 0, __ATOMIC_RELAXED);
  user_retire(u, user_close(u));
}

/* Thread exit: the user heaps the thread still has are released into its own heap,
 * which is then parked or dissolved like any exiting thread's; their blocks stay valid
 * and their handles read as destroyed. */
void heap_user_thread_exit(hak_heap_t *home) {
  if (home == NULL || home == &empty_heap) return;
  for (;;) {
    hak_heap_t *u = NULL;
    pthread_mutex_lock(&heaps_lock);
    for (hak_heap_t *v = users_live; v != NULL && u == NULL; v = v->user_next)
      if (v->owner_id == (uintptr_t)home) u = v;
    pthread_mutex_unlock(&heaps_lock);
    if (u == NULL) break;
    heap_user_release(u);
  }
  if (home->spare != NULL) {
    heap_spare_trim(home, os_now_ms(), true);
    heap_struct_free(home->spare);
    home->spare = NULL;
  }
  tls_alloc = home;
  heap_tls_last = &empty_heap;
}

/* How many references the calling thread holds on u (its remote chains, hardened:
 * its quarantine): in a forked child, the only ones left. */
static uint64_t refs_of_this_thread(const hak_heap_t *home, const hak_heap_t *u) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < REMOTE_CHAINS; i++) n += home->remote_user[i] == u;
  for (uint32_t i = 0; HAKMEM_SECURE && i < QUARANTINE_SLOTS; i++) n += home->quarantine_user[i] == u;
  return n;
}

/* In a forked child (after heap_atfork_child): the forking thread's user heaps stay on
 * the list of all heaps. The other threads' are as if their threads had exited: their
 * handles read as destroyed, their blocks stay valid, and their structures and lists
 * are never walked or reused (a thread frozen by the fork may have been changing them).
 * Locks another thread may have held at the fork are made anew, and references counted
 * again: those of threads that are gone will never be given back. */
void heap_user_atfork_child(void) {
  hak_heap_t *home = tls_heap;
  if (home == &empty_heap || heap_tls_last->owner_id != (uintptr_t)home) heap_tls_last = &empty_heap;
  for (hak_heap_t *u = users_live, *next; u != NULL; u = next) {
    next = u->user_next;
    pthread_mutex_init(&u->lock, NULL);
    if (home == &empty_heap || u->owner_id != (uintptr_t)home) {
      user_unlink(&users_live, u);
      u->orphaned = true;
      heap_slot_set_state(u, HEAP_SLOT_DEAD);
      continue;
    }
    u->all_prev = NULL;
    u->all_next = heaps_all;
    if (heaps_all) heaps_all->all_prev = u;
    heaps_all = u;
    atomic_store_explicit(&u->refs, refs_of_this_thread(home, u), memory_order_relaxed);
  }
  for (hak_heap_t *u = users_retired; u != NULL; u = u->user_next) {
    pthread_mutex_init(&u->lock, NULL);
    uint64_t mine = home != &empty_heap ? refs_of_this_thread(home, u) : 0;
    atomic_store_explicit(&u->refs, HEAP_REFS_RETIRED | mine, memory_order_relaxed);
  }
}

/* A user heap's block leaving the quarantine, which holds a reference on the heap
 * (user). Another thread's slab gets the block at once, under that reference: a chain
 * would take a second one, which a destruction since would refuse; a destroyed heap's
 * block went with it. Returns false for the caller to free the block as its owner. */
bool heap_user_block_release(void *p, slab_t *s, hak_heap_t *h, hak_heap_t *user) {
  bool destroyed = heap_user_destroyed(user);
  bool theirs = (slab_owner(s) & ~SLAB_FULL) != (uintptr_t)h;
  if (!destroyed && !theirs) { /* ours: the heap cannot go meanwhile */
    heap_user_unref(user);
    return false;
  }
  if (!destroyed) slab_remote_push(s, p, p, 1); /* tagged free since secure_free */
  heap_user_unref(user);
  return true;
}
