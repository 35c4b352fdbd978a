// A WebM (Matroska) muxer for already-encoded VP8 and Opus, over libavformat (libavformat-dev).
// Debian's libwebm-dev ships the parser headers only, not mkvmuxer's, hence libavformat.
//
// The muxer never touches a file: every byte it produces is kept in a pending buffer that the
// caller takes (rtc_webm_pending) and writes where and how it likes, then clears. Clusters are
// built whole in memory and handed over whole, so a file written that way always ends at a
// cluster boundary, and a process killed mid-stream leaves a file players read up to its last
// cluster. The segment and clusters have unknown sizes (the muxer's live mode): nothing is ever
// seeked back to, and no index is written.
#ifndef RTC_WEBM_H
#define RTC_WEBM_H
#include <stddef.h>
#include <stdint.h>

typedef struct rtc_webm rtc_webm;

typedef struct {
    /// Non-zero for a VP8 track (track 1 when present), with its first keyframe's size.
    int has_video;
    int width, height;
    /// Non-zero for an Opus track (after the video track when both are present).
    int has_audio;
    int audio_channels;
    /// Opus pre-skip in 48 kHz samples (OpusHead and CodecDelay); 312 for libopus encoders.
    int opus_pre_skip;
    /// A new cluster starts after this many milliseconds (and at video keyframes).
    int cluster_ms;
} rtc_webm_config;

enum { RTC_WEBM_VIDEO = 0, RTC_WEBM_AUDIO = 1 };

/// Loads libavformat (once, at the first call): 1 when it is there, else 0 with the reason in
/// `error`. rtc_webm_create calls it; a recorder may ask first to fall back to other files.
int rtc_webm_available(char *error, size_t error_size);

/// Starts a WebM: the EBML header, segment info and tracks go to the pending buffer. Returns NULL
/// with a message in `error` when libavformat refuses.
rtc_webm *rtc_webm_create(const rtc_webm_config *config, char *error, size_t error_size);

/// Adds one encoded frame of `track` (RTC_WEBM_VIDEO/RTC_WEBM_AUDIO) at `pts_ms` on the file's
/// timeline. Timestamps must not go back within a track. Returns 0, or -1 with a message.
int rtc_webm_write(rtc_webm *webm, int track, const uint8_t *data, size_t size, int64_t pts_ms, int keyframe,
                   char *error, size_t error_size);

/// Ends the last cluster (to the pending buffer). Returns 0, or -1 with a message. Call once.
int rtc_webm_finish(rtc_webm *webm, char *error, size_t error_size);

/// Bytes produced and not yet taken; valid until the next call on `webm`.
const uint8_t *rtc_webm_pending(const rtc_webm *webm, size_t *size);

/// Forgets the pending bytes (after the caller has written them).
void rtc_webm_clear_pending(rtc_webm *webm);

void rtc_webm_free(rtc_webm *webm);

#endif
