/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * mantle tags: the API for applications (link with -lmantle).
 *
 * Tags are labels carried by threads; requests a thread sends over IPC
 * carry its tags to the reader (see `mantle tag --help`). This header lets
 * a program read its own tags cheaply and change them without privileges;
 * creating and deleting tags needs root (a tag's owner may delete it).
 *
 * Every function returns >= 0 on success and a negative errno on failure:
 *   -ENODEV  kernel side not loaded (`mantle tags up`)
 *   -ENOSYS  the self-operation probe is not attached to this libmantle.so
 *   -ENOENT  unknown tag            -EEXIST  tag exists
 *   -ENOSPC  table/lifeline full    -EPERM   not allowed
 *   -EINVAL  bad argument           -EXDEV   class mismatch / terminated
 * mantle_strerror() describes them.
 *
 * The hot path: mantle_tags_self() costs a thread-local load and one load
 * from a read-only shared mapping after the first call (no system call).
 */
#ifndef MANTLE_TAGS_H
#define MANTLE_TAGS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MANTLE_TAG_SYSTEM 1u  /* mantle_tag_create flags: a system tag, */
#define MANTLE_TAG_REPLIES 2u /* one that travels with replies as well, */
#define MANTLE_TAG_DEADLOCK 4u /* a deadlock tag (marks call chains), */
#define MANTLE_TAG_ANYONE 8u  /* one any user may set on itself (else owner, root), */
#define MANTLE_TAG_PER_REQUEST 16u /* one receivers hold only until they answer */

/* Map the kernel side's tables now (otherwise done on first use). */
int mantle_tags_open(void);

/* The calling thread's first 64 tags, bit i = tag bit i; 0 if not loaded. */
uint64_t mantle_tags_self(void);
/* The whole vector (MT_TAGS bits); returns the number of words it has. */
int mantle_tags_read_self(uint64_t *out, uint32_t words);

/* Bit of a tag by name. */
int mantle_tag_lookup(const char *tag);
/* 1 if the calling thread holds tag, 0 if not. */
int mantle_tag_holds(const char *tag);

/* The calling thread's own state (no privilege needed). */
int mantle_tag_set(const char *tag, int ttl);     /* ttl 0: tag default */
int mantle_tag_set_ttl(const char *tag, int ttl); /* 0: hold, don't pass */
int mantle_tag_clear(const char *tag, int unused);
int mantle_tag_terminate(const char *tag, int unused);
int mantle_tag_unterminate(const char *tag, int unused);

/* Guarded synchronous call chains (deadlock detection, mTags section 5.3):
 * begin: the calling thread takes deadlock tag `tag` as the chain's origin;
 * a request that would reach a thread already holding it is reported, and
 * refused with EDEADLK where the kernel offers a deny point (TCP connect).
 * Each participant drops the tag when its own request is answered. */
int mantle_deadlock_begin(const char *tag, int unused);
int mantle_deadlock_end(const char *tag, int unused);

/* The table (root; delete: root or the tag's owner). ttl < 0: unlimited. */
int mantle_tag_create(const char *tag, int ttl, uint32_t flags, uint32_t lifeline);
int mantle_tag_delete(const char *tag);
/* Threads holding tag (root): fills up to n tids, returns the total. */
int mantle_tag_threads(const char *tag, uint32_t *tids, uint32_t n);

const char *mantle_strerror(int err);

/* The uprobe target behind the self-operations; not for direct use. */
void mantle_tag_ctl(uint32_t op, uint32_t tag, uint32_t arg, uint32_t seq);

#ifdef __cplusplus
}
#endif
#endif
