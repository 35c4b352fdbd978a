#include "rtc_webm.h"

#include <dlfcn.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// libavformat is loaded when the first WebM starts, not linked: it brings libavcodec and about a
// hundred codec and container libraries with it, and a process that never records (a screen
// sharer, a bot, the server) should not map them (docs/recording.md, "Loading libavformat").
// The names are the sonames of the headers this was built against.
#define RTC_SONAME(lib, major) "lib" lib ".so." AV_STRINGIFY(major)

static struct {
    int (*alloc_output_context2)(AVFormatContext **, const AVOutputFormat *, const char *, const char *);
    AVStream *(*new_stream)(AVFormatContext *, const AVCodec *);
    int (*write_header)(AVFormatContext *, AVDictionary **);
    int (*write_frame)(AVFormatContext *, AVPacket *);
    int (*write_trailer)(AVFormatContext *);
    void (*free_context)(AVFormatContext *);
    AVIOContext *(*avio_alloc_context)(unsigned char *, int, int, void *, int (*)(void *, uint8_t *, int),
                                       int (*)(void *, uint8_t *, int), int64_t (*)(void *, int64_t, int));
    void (*avio_context_free)(AVIOContext **);
    void (*avio_flush)(AVIOContext *);
    AVPacket *(*packet_alloc)(void);
    void (*packet_free)(AVPacket **);
    int (*new_packet)(AVPacket *, int);
    void (*packet_rescale_ts)(AVPacket *, AVRational, AVRational);
    void (*channel_layout_default)(AVChannelLayout *, int);
    int (*dict_set)(AVDictionary **, const char *, const char *, int);
    void (*dict_free)(AVDictionary **);
    void *(*malloc)(size_t);
    void *(*mallocz)(size_t);
    void (*free)(void *);
    void (*freep)(void *);
    int (*strerror)(int, char *, size_t);
} av;
static pthread_once_t av_once = PTHREAD_ONCE_INIT;
/// Written once, inside av_once: the reason libavformat is missing, or empty once it loaded.
static char av_failure[256] = "libavformat did not load";

static void load_libav(void) {
    const char *names[] = {RTC_SONAME("avformat", LIBAVFORMAT_VERSION_MAJOR), RTC_SONAME("avcodec", LIBAVCODEC_VERSION_MAJOR),
                           RTC_SONAME("avutil", LIBAVUTIL_VERSION_MAJOR)};
    void *handles[3];
    for (int i = 0; i < 3; i++) {
        handles[i] = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!handles[i]) {
            const char *reason = dlerror();
            snprintf(av_failure, sizeof av_failure, "recording WebM needs %s (libavformat from FFmpeg): %s", names[i],
                     reason ? reason : "not found");
            return;
        }
    }
    struct { void **slot; int library; const char *name; } symbols[] = {
        {(void **)&av.alloc_output_context2, 0, "avformat_alloc_output_context2"},
        {(void **)&av.new_stream, 0, "avformat_new_stream"},
        {(void **)&av.write_header, 0, "avformat_write_header"},
        {(void **)&av.write_frame, 0, "av_write_frame"},
        {(void **)&av.write_trailer, 0, "av_write_trailer"},
        {(void **)&av.free_context, 0, "avformat_free_context"},
        {(void **)&av.avio_alloc_context, 0, "avio_alloc_context"},
        {(void **)&av.avio_context_free, 0, "avio_context_free"},
        {(void **)&av.avio_flush, 0, "avio_flush"},
        {(void **)&av.packet_alloc, 1, "av_packet_alloc"},
        {(void **)&av.packet_free, 1, "av_packet_free"},
        {(void **)&av.new_packet, 1, "av_new_packet"},
        {(void **)&av.packet_rescale_ts, 1, "av_packet_rescale_ts"},
        {(void **)&av.channel_layout_default, 2, "av_channel_layout_default"},
        {(void **)&av.dict_set, 2, "av_dict_set"},
        {(void **)&av.dict_free, 2, "av_dict_free"},
        {(void **)&av.malloc, 2, "av_malloc"},
        {(void **)&av.mallocz, 2, "av_mallocz"},
        {(void **)&av.free, 2, "av_free"},
        {(void **)&av.freep, 2, "av_freep"},
        {(void **)&av.strerror, 2, "av_strerror"},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(handles[symbols[i].library], symbols[i].name);
        if (!*symbols[i].slot) {
            snprintf(av_failure, sizeof av_failure, "%s has no %s", names[symbols[i].library], symbols[i].name);
            return;
        }
    }
    av_failure[0] = 0;
}

/// Loads libavformat once; returns its failure (empty when loaded).
static const char *libav_failure(void) {
    pthread_once(&av_once, load_libav);
    return av_failure;
}

int rtc_webm_available(char *error, size_t error_size) {
    const char *failure = libav_failure();
    if (failure[0] == 0) return 1;
    if (error && error_size > 0) snprintf(error, error_size, "%s", failure);
    return 0;
}

struct rtc_webm {
    AVFormatContext *format;
    AVIOContext *io;
    int video_index, audio_index;
    uint8_t *pending;
    size_t pending_size, pending_capacity;
    int failed;
};

static void describe(int code, const char *what, char *error, size_t error_size) {
    if (!error || error_size == 0) return;
    char reason[128];
    av.strerror(code, reason, sizeof reason);
    snprintf(error, error_size, "%s: %s", what, reason);
}

// libavformat's output callback: appends to the pending buffer.
static int collect(void *opaque, uint8_t *data, int size) {
    rtc_webm *webm = opaque;
    if (size <= 0) return 0;
    size_t needed = webm->pending_size + (size_t)size;
    if (needed > webm->pending_capacity) {
        size_t capacity = webm->pending_capacity ? webm->pending_capacity : 64 * 1024;
        while (capacity < needed) capacity *= 2;
        uint8_t *grown = realloc(webm->pending, capacity);
        if (!grown) {
            webm->failed = 1;
            return AVERROR(ENOMEM);
        }
        webm->pending = grown;
        webm->pending_capacity = capacity;
    }
    memcpy(webm->pending + webm->pending_size, data, (size_t)size);
    webm->pending_size = needed;
    return size;
}

static int add_video(rtc_webm *webm, const rtc_webm_config *config) {
    AVStream *stream = av.new_stream(webm->format, NULL);
    if (!stream) return AVERROR(ENOMEM);
    stream->time_base = (AVRational){1, 1000};
    stream->codecpar->codec_type = AVMEDIA_TYPE_VIDEO;
    stream->codecpar->codec_id = AV_CODEC_ID_VP8;
    stream->codecpar->width = config->width;
    stream->codecpar->height = config->height;
    webm->video_index = stream->index;
    return 0;
}

static int add_audio(rtc_webm *webm, const rtc_webm_config *config) {
    AVStream *stream = av.new_stream(webm->format, NULL);
    if (!stream) return AVERROR(ENOMEM);
    int channels = config->audio_channels > 0 ? config->audio_channels : 2;
    stream->time_base = (AVRational){1, 1000};
    stream->codecpar->codec_type = AVMEDIA_TYPE_AUDIO;
    stream->codecpar->codec_id = AV_CODEC_ID_OPUS;
    stream->codecpar->sample_rate = 48000;
    av.channel_layout_default(&stream->codecpar->ch_layout, channels);
    stream->codecpar->initial_padding = config->opus_pre_skip;
    // OpusHead (RFC 7845 §5.1), the Matroska CodecPrivate of an Opus track.
    uint8_t *head = av.mallocz(19 + AV_INPUT_BUFFER_PADDING_SIZE);
    if (!head) return AVERROR(ENOMEM);
    memcpy(head, "OpusHead", 8);
    head[8] = 1;
    head[9] = (uint8_t)channels;
    head[10] = (uint8_t)(config->opus_pre_skip & 0xFF);
    head[11] = (uint8_t)(config->opus_pre_skip >> 8);
    uint32_t rate = 48000;
    for (int i = 0; i < 4; i++) head[12 + i] = (uint8_t)(rate >> (8 * i));
    stream->codecpar->extradata = head;
    stream->codecpar->extradata_size = 19;
    webm->audio_index = stream->index;
    return 0;
}

rtc_webm *rtc_webm_create(const rtc_webm_config *config, char *error, size_t error_size) {
    if (!config->has_video && !config->has_audio) {
        snprintf(error, error_size, "a WebM needs a video or an audio track");
        return NULL;
    }
    if (!rtc_webm_available(error, error_size)) return NULL;
    rtc_webm *webm = calloc(1, sizeof *webm);
    if (!webm) return NULL;
    webm->video_index = webm->audio_index = -1;
    int code = av.alloc_output_context2(&webm->format, NULL, "webm", NULL);
    if (code < 0 || !webm->format) {
        describe(code, "no WebM muxer in libavformat", error, error_size);
        rtc_webm_free(webm);
        return NULL;
    }
    unsigned char *buffer = av.malloc(64 * 1024);
    webm->io = buffer ? av.avio_alloc_context(buffer, 64 * 1024, 1, webm, NULL, collect, NULL) : NULL;
    if (!webm->io) {
        av.free(buffer);
        snprintf(error, error_size, "out of memory");
        rtc_webm_free(webm);
        return NULL;
    }
    webm->io->seekable = 0;
    webm->format->pb = webm->io;
    webm->format->flags |= AVFMT_FLAG_CUSTOM_IO | AVFMT_FLAG_FLUSH_PACKETS;
    if (config->has_video) code = add_video(webm, config);
    if (code >= 0 && config->has_audio) code = add_audio(webm, config);
    AVDictionary *options = NULL;
    char cluster[32];
    snprintf(cluster, sizeof cluster, "%d", config->cluster_ms > 0 ? config->cluster_ms : 1000);
    av.dict_set(&options, "live", "1", 0);
    av.dict_set(&options, "cluster_time_limit", cluster, 0);
    if (code >= 0) code = av.write_header(webm->format, &options);
    av.dict_free(&options);
    if (code >= 0) av.avio_flush(webm->io);
    if (code < 0 || webm->failed) {
        describe(code < 0 ? code : AVERROR(ENOMEM), "cannot start the WebM", error, error_size);
        rtc_webm_free(webm);
        return NULL;
    }
    return webm;
}

int rtc_webm_write(rtc_webm *webm, int track, const uint8_t *data, size_t size, int64_t pts_ms, int keyframe,
                   char *error, size_t error_size) {
    int index = track == RTC_WEBM_VIDEO ? webm->video_index : webm->audio_index;
    if (index < 0) {
        snprintf(error, error_size, "the WebM has no %s track", track == RTC_WEBM_VIDEO ? "video" : "audio");
        return -1;
    }
    AVPacket *packet = av.packet_alloc();
    if (!packet || av.new_packet(packet, (int)size) < 0) {
        av.packet_free(&packet);
        snprintf(error, error_size, "out of memory");
        return -1;
    }
    memcpy(packet->data, data, size);
    packet->stream_index = index;
    packet->pts = packet->dts = pts_ms;
    if (track == RTC_WEBM_AUDIO) packet->duration = 20;
    if (keyframe || track == RTC_WEBM_AUDIO) packet->flags |= AV_PKT_FLAG_KEY;
    // Rescaled in case the muxer chose another time base than 1/1000 for the stream.
    av.packet_rescale_ts(packet, (AVRational){1, 1000}, webm->format->streams[index]->time_base);
    int code = av.write_frame(webm->format, packet);
    av.packet_free(&packet);
    if (code >= 0) av.avio_flush(webm->io);
    if (code < 0 || webm->failed) {
        describe(code < 0 ? code : AVERROR(ENOMEM), "cannot add a frame to the WebM", error, error_size);
        return -1;
    }
    return 0;
}

int rtc_webm_finish(rtc_webm *webm, char *error, size_t error_size) {
    int code = av.write_trailer(webm->format);
    if (code >= 0) av.avio_flush(webm->io);
    if (code < 0 || webm->failed) {
        describe(code < 0 ? code : AVERROR(ENOMEM), "cannot end the WebM", error, error_size);
        return -1;
    }
    return 0;
}

const uint8_t *rtc_webm_pending(const rtc_webm *webm, size_t *size) {
    *size = webm->pending_size;
    return webm->pending;
}

void rtc_webm_clear_pending(rtc_webm *webm) { webm->pending_size = 0; }

void rtc_webm_free(rtc_webm *webm) {
    if (!webm) return;
    if (webm->io) {
        av.freep(&webm->io->buffer);
        av.avio_context_free(&webm->io);
    }
    if (webm->format) {
        webm->format->pb = NULL;
        av.free_context(webm->format);
    }
    free(webm->pending);
    free(webm);
}
