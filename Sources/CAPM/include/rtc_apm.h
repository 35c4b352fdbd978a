// A C facade over webrtc-audio-processing 0.3 (a C++ library), so that Swift can call it.
#ifndef RTC_APM_H
#define RTC_APM_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct rtc_apm rtc_apm;

/// Settings applied at creation. Levels: noise suppression 0 off, 1 low .. 4 very high;
/// gain control 0 off, 1 adaptive digital, 2 fixed digital; echo 0 off, 1 low .. 3 high suppression.
typedef struct rtc_apm_config {
    int sample_rate_hz;   // 16000, 32000 or 48000
    int channels;         // 1 or 2
    int echo_cancellation;
    int noise_suppression;
    int gain_control;
    int high_pass_filter; // 0 or 1
} rtc_apm_config;

/// Creates a processor, or returns NULL and writes an APM error code (or -1) to `error`.
rtc_apm *rtc_apm_create(const rtc_apm_config *config, int *error);
void rtc_apm_destroy(rtc_apm *apm);

/// Feeds one 10 ms far-end (played out) frame of interleaved samples. Returns 0 or an APM error.
int rtc_apm_process_reverse(rtc_apm *apm, const int16_t *samples, int samples_per_channel);
/// Processes one 10 ms near-end (captured) frame in place. Returns 0 or an APM error.
int rtc_apm_process_capture(rtc_apm *apm, int16_t *samples, int samples_per_channel, int delay_ms);
/// 1 when the last capture frame was judged to contain an echo-free voice, 0 otherwise.
int rtc_apm_last_has_voice(rtc_apm *apm);

#ifdef __cplusplus
}
#endif
#endif
