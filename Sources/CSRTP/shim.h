// libsrtp2, for SRTP/SRTCP protection of media (RFC 3711, keyed by DTLS-SRTP, RFC 5764).
#ifndef RTC_CSRTP_SHIM_H
#define RTC_CSRTP_SHIM_H
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <srtp2/srtp.h>

/// SRTP protection profile IDs of RFC 5764 §4.1.2 and RFC 7714 §14.2.
enum { RTC_SRTP_AES128_CM_SHA1_80 = 1, RTC_SRTP_AEAD_AES_128_GCM = 7 };


/// The libsrtp2 entry points the SDK calls, from one copy of the library. The process's linked
/// copy is one; ``rtc_srtp_api_open_copy`` loads another, in a link-map namespace of its own.
///
/// Why copies: Debian builds libsrtp2 on NSS, and NSS's AES-GCM opens a softoken session per
/// packet under locks that are global to the process, so two threads protecting packets at once
/// mostly wait for each other. A copy in its own namespace has its own NSS, softoken and locks
/// (and its own libc), so each media thread can protect with no lock in common with the others.
typedef struct rtc_srtp_api {
    /// The copy's libc `__ctype_init` (NULL for the linked library): see ``rtc_srtp_api_enter``.
    void (*ctype_init)(void);
    /// The copy's number (1 up; 0 for the linked library) and the first of the thread-specific
    /// key indexes it was given (``rtc_srtp_confine_keys``).
    int number;
    int key_first;
    srtp_err_status_t (*create)(srtp_t *, const srtp_policy_t *);
    srtp_err_status_t (*dealloc)(srtp_t);
    srtp_err_status_t (*protect)(srtp_t, void *, int *);
    srtp_err_status_t (*unprotect)(srtp_t, void *, int *);
    srtp_err_status_t (*protect_rtcp)(srtp_t, void *, int *);
    srtp_err_status_t (*unprotect_rtcp)(srtp_t, void *, int *);
} rtc_srtp_api;

/// The copy the process linked (initialized by the caller with `srtp_init`).
static inline rtc_srtp_api rtc_srtp_api_linked(void) {
    rtc_srtp_api api = { NULL, 0, -1, srtp_create, srtp_dealloc, srtp_protect, srtp_unprotect, srtp_protect_rtcp, srtp_unprotect_rtcp };
    return api;
}

/// glibc's dlmopen and LM_ID_NEWLM, declared here: the system module's <dlfcn.h> is built
/// without _GNU_SOURCE, which hides them.
#if defined(__GLIBC__)
extern void *dlmopen(long namespace_id, const char *file, int mode);
#endif
enum { RTC_LM_ID_NEWLM = -1 };

/// Key indexes a copy gets (NSPR under NSS takes one), the indexes they must lie under, the
/// copies there can be at most (the bits of ``rtc_srtp_api_enter``'s per-thread mask).
enum { RTC_SRTP_KEY_BLOCK = 2, RTC_SRTP_KEY_LIMIT = 32, RTC_SRTP_MAX_COPIES = 31 };

/// Thread-specific keys of a copy, kept apart from the process's. Each libc has its own key table,
/// but all keep a thread's values in the one thread descriptor, and the process's libc runs its
/// own keys' destructors on those slots when a thread ends. A key NSPR (under NSS) takes in the
/// copy would land on an index the process's libc gave someone else, whose destructor would then
/// get NSPR's value. So:
/// - the process's libc holds RTC_SRTP_KEY_BLOCK free indexes in a row below RTC_SRTP_KEY_LIMIT,
///   with no destructor, for good. Below that limit a thread's values sit in the descriptor itself:
///   never in memory that one libc allocates and the other frees;
/// - the copy's libc, new and empty, holds every index but the block's, up to its limit, for
///   good: its own keys can only be the block's, and one more fails instead of landing elsewhere.
/// Returns the block's first index, or -1 with the reason in `error`.
static inline int rtc_srtp_confine_keys(void *handle, char *error, size_t error_size) {
    int (*copy_create)(pthread_key_t *, void (*)(void *)) = (int (*)(pthread_key_t *, void (*)(void *)))dlsym(handle, "pthread_key_create");
    int (*copy_delete)(pthread_key_t) = (int (*)(pthread_key_t))dlsym(handle, "pthread_key_delete");
    if (copy_create == NULL || copy_delete == NULL) {
        snprintf(error, error_size, "the copy's libc has no pthread_key_create");
        return -1;
    }
    /* Every free index below the limit, from the process's libc. */
    int held[RTC_SRTP_KEY_LIMIT] = {0};
    for (;;) {
        pthread_key_t key;
        if (pthread_key_create(&key, NULL) != 0) break;
        if (key >= RTC_SRTP_KEY_LIMIT) {
            pthread_key_delete(key);
            break;
        }
        held[key] = 1;
    }
    int first = -1;
    for (int start = RTC_SRTP_KEY_LIMIT - RTC_SRTP_KEY_BLOCK; start >= 0 && first < 0; start--) {
        int run = 1;
        for (int i = start; i < start + RTC_SRTP_KEY_BLOCK; i++) run = run && held[i];
        if (run) first = start;
    }
    for (int i = 0; i < RTC_SRTP_KEY_LIMIT; i++)
        if (held[i] && (first < 0 || i < first || i >= first + RTC_SRTP_KEY_BLOCK)) pthread_key_delete((pthread_key_t)i);
    if (first < 0) {
        snprintf(error, error_size, "no %d thread-specific keys in a row are free below %d", RTC_SRTP_KEY_BLOCK, RTC_SRTP_KEY_LIMIT);
        return -1;
    }
    /* The copy's libc must be untouched (its keys from 0 up); then it holds them all but the block. */
    pthread_key_t key, expected = 0;
    while (copy_create(&key, NULL) == 0) {
        if (key != expected) {
            snprintf(error, error_size, "the copy's libc had thread-specific keys already (got %u, not %u)", key, expected);
            for (int i = first; i < first + RTC_SRTP_KEY_BLOCK; i++) pthread_key_delete((pthread_key_t)i);
            return -1;
        }
        expected++;
    }
    for (int i = first; i < first + RTC_SRTP_KEY_BLOCK; i++) copy_delete((pthread_key_t)i);
    return first;
}

/// Before each call into `api`'s copy on the calling thread:
/// - the copy's `__ctype_init`: a libc that is not the process's first sets up its per-thread
///   ctype pointers only in threads it made itself, and NSS's argument parsing reads them;
/// - the first time on this thread, the copy's key slots are emptied through the process's libc
///   (which holds them): a value left there by an earlier owner of the index, with a sequence
///   number that happens to match the copy's, would otherwise read as NSPR's.
static inline void rtc_srtp_api_enter(const rtc_srtp_api *api) {
    if (api->ctype_init == NULL) return;
    static _Thread_local unsigned int entered;  /* a bit per copy number */
    unsigned int bit = 1u << api->number;
    if ((entered & bit) == 0) {
        for (int i = 0; i < RTC_SRTP_KEY_BLOCK; i++) pthread_setspecific((pthread_key_t)(api->key_first + i), NULL);
        entered |= bit;
    }
    api->ctype_init();
}

/// Loads copy `number` (1 ... RTC_SRTP_MAX_COPIES) of libsrtp2, with its NSS and libc, in a new
/// link-map namespace and initializes it. Returns a heap-allocated table that lives as long as
/// the process, or NULL with the reason in `error`.
static inline rtc_srtp_api *rtc_srtp_api_open_copy(int number, char *error, size_t error_size) {
#if !defined(__GLIBC__)
    (void)number;
    snprintf(error, error_size, "copies need glibc's dlmopen");
    return NULL;
#else
    if (number < 1 || number > RTC_SRTP_MAX_COPIES) {
        snprintf(error, error_size, "copy number %d is not 1...%d", number, RTC_SRTP_MAX_COPIES);
        return NULL;
    }
    void *handle = dlmopen(RTC_LM_ID_NEWLM, "libsrtp2.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *reason = dlerror();
        snprintf(error, error_size, "dlmopen libsrtp2.so.1: %s", reason ? reason : "unknown error");
        return NULL;
    }
    rtc_srtp_api *api = calloc(1, sizeof *api);
    srtp_err_status_t (*init)(void) = (srtp_err_status_t (*)(void))dlsym(handle, "srtp_init");
    if (api == NULL || init == NULL) {
        snprintf(error, error_size, api == NULL ? "out of memory" : "srtp_init not found in the copy");
        free(api);
        dlclose(handle);
        return NULL;
    }
    api->number = number;
    api->ctype_init = (void (*)(void))dlsym(handle, "__ctype_init");
    api->create = (srtp_err_status_t (*)(srtp_t *, const srtp_policy_t *))dlsym(handle, "srtp_create");
    api->dealloc = (srtp_err_status_t (*)(srtp_t))dlsym(handle, "srtp_dealloc");
    api->protect = (srtp_err_status_t (*)(srtp_t, void *, int *))dlsym(handle, "srtp_protect");
    api->unprotect = (srtp_err_status_t (*)(srtp_t, void *, int *))dlsym(handle, "srtp_unprotect");
    api->protect_rtcp = (srtp_err_status_t (*)(srtp_t, void *, int *))dlsym(handle, "srtp_protect_rtcp");
    api->unprotect_rtcp = (srtp_err_status_t (*)(srtp_t, void *, int *))dlsym(handle, "srtp_unprotect_rtcp");
    if (api->ctype_init == NULL || api->create == NULL || api->dealloc == NULL || api->protect == NULL || api->unprotect == NULL
        || api->protect_rtcp == NULL || api->unprotect_rtcp == NULL) {
        snprintf(error, error_size, "a libsrtp2 or libc entry point is missing in the copy");
        free(api);
        dlclose(handle);
        return NULL;
    }
    api->key_first = rtc_srtp_confine_keys(handle, error, error_size);
    if (api->key_first < 0) {
        free(api);
        dlclose(handle);
        return NULL;
    }
    rtc_srtp_api_enter(api);
    srtp_err_status_t status = init();
    if (status != srtp_err_status_ok) {
        snprintf(error, error_size, "srtp_init in the copy failed (status %d)", (int)status);
        for (int i = api->key_first; i < api->key_first + RTC_SRTP_KEY_BLOCK; i++) pthread_key_delete((pthread_key_t)i);
        free(api);
        /* Not closed: NSS may have loaded its modules in the namespace, and its finalizers run at exit. */
        return NULL;
    }
    return api;
#endif
}

/// Creates a session for every inbound (or outbound) SSRC with one master key and salt, in `api`'s
/// copy. Streams for new SSRCs are added on the fly from this template.
static inline srtp_err_status_t rtc_srtp_api_create(const rtc_srtp_api *api, srtp_t *session, int profile,
                                                    const unsigned char *key_and_salt, int inbound, unsigned long window) {
    srtp_policy_t policy;
    memset(&policy, 0, sizeof policy);
    /* The policy setters only fill in the struct: the linked copy's serve every copy. */
    if (profile == RTC_SRTP_AEAD_AES_128_GCM) {
        srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtp);
        srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy.rtcp);
    } else {
        srtp_crypto_policy_set_rtp_default(&policy.rtp);
        srtp_crypto_policy_set_rtcp_default(&policy.rtcp);
    }
    policy.ssrc.type = inbound ? ssrc_any_inbound : ssrc_any_outbound;
    policy.key = (unsigned char *)key_and_salt;
    policy.window_size = window;
    policy.allow_repeat_tx = 1;  /* retransmissions from a NACK cache re-send the same index */
    policy.next = NULL;
    rtc_srtp_api_enter(api);
    return api->create(session, &policy);
}

/// `operation`: 0 protect RTP, 1 unprotect RTP, 2 protect RTCP, 3 unprotect RTCP.
static inline srtp_err_status_t rtc_srtp_api_run(const rtc_srtp_api *api, int operation, srtp_t session, void *bytes, int *length) {
    rtc_srtp_api_enter(api);
    switch (operation) {
    case 0: return api->protect(session, bytes, length);
    case 1: return api->unprotect(session, bytes, length);
    case 2: return api->protect_rtcp(session, bytes, length);
    default: return api->unprotect_rtcp(session, bytes, length);
    }
}

static inline void rtc_srtp_api_dealloc(const rtc_srtp_api *api, srtp_t session) {
    rtc_srtp_api_enter(api);
    api->dealloc(session);
}
#endif
