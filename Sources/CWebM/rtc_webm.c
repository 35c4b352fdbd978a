#include "rtc_webm.h"

#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    av_strerror(code, reason, sizeof reason);
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
    AVStream *stream = avformat_new_stream(webm->format, NULL);
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
    AVStream *stream = avformat_new_stream(webm->format, NULL);
    if (!stream) return AVERROR(ENOMEM);
    int channels = config->audio_channels > 0 ? config->audio_channels : 2;
    stream->time_base = (AVRational){1, 1000};
    stream->codecpar->codec_type = AVMEDIA_TYPE_AUDIO;
    stream->codecpar->codec_id = AV_CODEC_ID_OPUS;
    stream->codecpar->sample_rate = 48000;
    av_channel_layout_default(&stream->codecpar->ch_layout, channels);
    stream->codecpar->initial_padding = config->opus_pre_skip;
    // OpusHead (RFC 7845 §5.1), the Matroska CodecPrivate of an Opus track.
    uint8_t *head = av_mallocz(19 + AV_INPUT_BUFFER_PADDING_SIZE);
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
    rtc_webm *webm = calloc(1, sizeof *webm);
    if (!webm) return NULL;
    webm->video_index = webm->audio_index = -1;
    int code = avformat_alloc_output_context2(&webm->format, NULL, "webm", NULL);
    if (code < 0 || !webm->format) {
        describe(code, "no WebM muxer in libavformat", error, error_size);
        rtc_webm_free(webm);
        return NULL;
    }
    unsigned char *buffer = av_malloc(64 * 1024);
    webm->io = buffer ? avio_alloc_context(buffer, 64 * 1024, 1, webm, NULL, collect, NULL) : NULL;
    if (!webm->io) {
        av_free(buffer);
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
    av_dict_set(&options, "live", "1", 0);
    av_dict_set(&options, "cluster_time_limit", cluster, 0);
    if (code >= 0) code = avformat_write_header(webm->format, &options);
    av_dict_free(&options);
    if (code >= 0) avio_flush(webm->io);
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
    AVPacket *packet = av_packet_alloc();
    if (!packet || av_new_packet(packet, (int)size) < 0) {
        av_packet_free(&packet);
        snprintf(error, error_size, "out of memory");
        return -1;
    }
    memcpy(packet->data, data, size);
    packet->stream_index = index;
    packet->pts = packet->dts = pts_ms;
    if (track == RTC_WEBM_AUDIO) packet->duration = 20;
    if (keyframe || track == RTC_WEBM_AUDIO) packet->flags |= AV_PKT_FLAG_KEY;
    // Rescaled in case the muxer chose another time base than 1/1000 for the stream.
    av_packet_rescale_ts(packet, (AVRational){1, 1000}, webm->format->streams[index]->time_base);
    int code = av_write_frame(webm->format, packet);
    av_packet_free(&packet);
    if (code >= 0) avio_flush(webm->io);
    if (code < 0 || webm->failed) {
        describe(code < 0 ? code : AVERROR(ENOMEM), "cannot add a frame to the WebM", error, error_size);
        return -1;
    }
    return 0;
}

int rtc_webm_finish(rtc_webm *webm, char *error, size_t error_size) {
    int code = av_write_trailer(webm->format);
    if (code >= 0) avio_flush(webm->io);
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
        av_freep(&webm->io->buffer);
        avio_context_free(&webm->io);
    }
    if (webm->format) {
        webm->format->pb = NULL;
        avformat_free_context(webm->format);
    }
    free(webm->pending);
    free(webm);
}
