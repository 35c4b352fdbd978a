// The C facade over webrtc::AudioProcessing (0.3). One rtc_apm per capture stream; not thread-safe:
// the caller keeps reverse and capture calls on one thread (see AudioProcessor.swift).
#include "rtc_apm.h"

#include <cstring>
#include <memory>
#include <new>

#include <webrtc/modules/audio_processing/include/audio_processing.h>
#include <webrtc/modules/interface/module_common_types.h>

struct rtc_apm {
    std::unique_ptr<webrtc::AudioProcessing> apm;
    webrtc::AudioFrame frame;
    int sample_rate_hz = 0;
    int channels = 0;
    bool voice = false;
};

namespace {
webrtc::AudioProcessing::ChannelLayout layoutFor(int channels) {
    return channels == 2 ? webrtc::AudioProcessing::kStereo : webrtc::AudioProcessing::kMono;
}

bool fill(rtc_apm *apm, const int16_t *samples, int samples_per_channel) {
    const size_t count = static_cast<size_t>(samples_per_channel) * static_cast<size_t>(apm->channels);
    if (samples_per_channel != apm->sample_rate_hz / 100 || count > webrtc::AudioFrame::kMaxDataSizeSamples) {
        return false;
    }
    apm->frame.sample_rate_hz_ = apm->sample_rate_hz;
    apm->frame.num_channels_ = apm->channels;
    apm->frame.samples_per_channel_ = static_cast<size_t>(samples_per_channel);
    std::memcpy(apm->frame.data_, samples, count * sizeof(int16_t));
    return true;
}
}  // namespace

extern "C" rtc_apm *rtc_apm_create(const rtc_apm_config *config, int *error) {
    *error = -1;
    const int rate = config->sample_rate_hz;
    if ((rate != 16000 && rate != 32000 && rate != 48000) || config->channels < 1 || config->channels > 2) {
        return nullptr;
    }
    rtc_apm *self = new (std::nothrow) rtc_apm();
    if (self == nullptr) return nullptr;
    self->apm.reset(webrtc::AudioProcessing::Create());
    if (!self->apm) { delete self; return nullptr; }
    self->sample_rate_hz = rate;
    self->channels = config->channels;
    const auto layout = layoutFor(config->channels);
    int rc = self->apm->Initialize(rate, rate, rate, layout, layout, layout);
    if (rc != 0) { *error = rc; delete self; return nullptr; }

    webrtc::AudioProcessing &apm = *self->apm;
    rc |= apm.high_pass_filter()->Enable(config->high_pass_filter != 0);
    if (config->echo_cancellation > 0) {
        webrtc::EchoCancellation::SuppressionLevel level =
            config->echo_cancellation == 1 ? webrtc::EchoCancellation::kLowSuppression
            : config->echo_cancellation == 2 ? webrtc::EchoCancellation::kModerateSuppression
                                             : webrtc::EchoCancellation::kHighSuppression;
        rc |= apm.echo_cancellation()->enable_drift_compensation(false);
        rc |= apm.echo_cancellation()->set_suppression_level(level);
        rc |= apm.echo_cancellation()->Enable(true);
    }
    if (config->noise_suppression > 0) {
        webrtc::NoiseSuppression::Level level =
            config->noise_suppression == 1 ? webrtc::NoiseSuppression::kLow
            : config->noise_suppression == 2 ? webrtc::NoiseSuppression::kModerate
            : config->noise_suppression == 3 ? webrtc::NoiseSuppression::kHigh
                                             : webrtc::NoiseSuppression::kVeryHigh;
        rc |= apm.noise_suppression()->set_level(level);
        rc |= apm.noise_suppression()->Enable(true);
    }
    if (config->gain_control > 0) {
        rc |= apm.gain_control()->set_mode(config->gain_control == 1 ? webrtc::GainControl::kAdaptiveDigital
                                                                     : webrtc::GainControl::kFixedDigital);
        rc |= apm.gain_control()->set_target_level_dbfs(3);
        rc |= apm.gain_control()->set_compression_gain_db(9);
        rc |= apm.gain_control()->enable_limiter(true);
        rc |= apm.gain_control()->Enable(true);
    }
    rc |= apm.voice_detection()->Enable(true);
    if (rc != 0) { *error = rc; delete self; return nullptr; }
    *error = 0;
    return self;
}

extern "C" void rtc_apm_destroy(rtc_apm *apm) { delete apm; }

extern "C" int rtc_apm_process_reverse(rtc_apm *apm, const int16_t *samples, int samples_per_channel) {
    if (!fill(apm, samples, samples_per_channel)) return webrtc::AudioProcessing::kBadDataLengthError;
    return apm->apm->ProcessReverseStream(&apm->frame);
}

extern "C" int rtc_apm_process_capture(rtc_apm *apm, int16_t *samples, int samples_per_channel, int delay_ms) {
    if (!fill(apm, samples, samples_per_channel)) return webrtc::AudioProcessing::kBadDataLengthError;
    if (apm->apm->echo_cancellation()->is_enabled()) {
        apm->apm->set_stream_delay_ms(delay_ms);
    }
    const int rc = apm->apm->ProcessStream(&apm->frame);
    if (rc != 0) return rc;
    apm->voice = apm->apm->voice_detection()->stream_has_voice();
    std::memcpy(samples, apm->frame.data_,
                static_cast<size_t>(samples_per_channel) * static_cast<size_t>(apm->channels) * sizeof(int16_t));
    return 0;
}

extern "C" int rtc_apm_last_has_voice(rtc_apm *apm) { return apm->voice ? 1 : 0; }
