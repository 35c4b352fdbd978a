// One wrapper per variadic opus_*_ctl request that the SDK uses.
#ifndef RTC_COPUS_SHIM_H
#define RTC_COPUS_SHIM_H
#include <opus/opus.h>

static inline int rtc_opus_set_bitrate(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_BITRATE(v)); }
static inline int rtc_opus_get_bitrate(OpusEncoder *e, opus_int32 *v) { return opus_encoder_ctl(e, OPUS_GET_BITRATE(v)); }
static inline int rtc_opus_set_inband_fec(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_INBAND_FEC(v)); }
static inline int rtc_opus_set_packet_loss_perc(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_PACKET_LOSS_PERC(v)); }
static inline int rtc_opus_set_dtx(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_DTX(v)); }
static inline int rtc_opus_set_complexity(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_COMPLEXITY(v)); }
static inline int rtc_opus_get_lookahead(OpusEncoder *e, opus_int32 *v) { return opus_encoder_ctl(e, OPUS_GET_LOOKAHEAD(v)); }
static inline int rtc_opus_set_signal(OpusEncoder *e, opus_int32 v) { return opus_encoder_ctl(e, OPUS_SET_SIGNAL(v)); }
static inline int rtc_opus_signal_auto(void) { return OPUS_AUTO; }
static inline int rtc_opus_signal_voice(void) { return OPUS_SIGNAL_VOICE; }
static inline int rtc_opus_signal_music(void) { return OPUS_SIGNAL_MUSIC; }
static inline int rtc_opus_app_voip(void) { return OPUS_APPLICATION_VOIP; }
static inline int rtc_opus_app_audio(void) { return OPUS_APPLICATION_AUDIO; }
static inline int rtc_opus_app_lowdelay(void) { return OPUS_APPLICATION_RESTRICTED_LOWDELAY; }
#endif
