// Wrappers for the parts of libvpx that Swift cannot import: init macros and variadic controls.
#ifndef RTC_CVPX_SHIM_H
#define RTC_CVPX_SHIM_H
#include <vpx/vpx_encoder.h>
#include <vpx/vpx_decoder.h>
#include <vpx/vp8cx.h>
#include <vpx/vp8dx.h>

static inline vpx_codec_err_t rtc_vpx_enc_init(vpx_codec_ctx_t *ctx, const vpx_codec_enc_cfg_t *cfg,
                                               vpx_codec_flags_t flags) {
    return vpx_codec_enc_init(ctx, vpx_codec_vp8_cx(), cfg, flags);
}
static inline vpx_codec_err_t rtc_vpx_dec_init(vpx_codec_ctx_t *ctx, unsigned int threads) {
    vpx_codec_dec_cfg_t cfg = {0};
    cfg.threads = threads;
    return vpx_codec_dec_init(ctx, vpx_codec_vp8_dx(), &cfg, 0);
}
static inline vpx_codec_err_t rtc_vpx_enc_config_default(vpx_codec_enc_cfg_t *cfg) {
    return vpx_codec_enc_config_default(vpx_codec_vp8_cx(), cfg, 0);
}
static inline vpx_codec_err_t rtc_vpx_set_int(vpx_codec_ctx_t *ctx, int control, int value) {
    return vpx_codec_control_(ctx, control, value);
}
static inline vpx_codec_err_t rtc_vpx_set_temporal_layer_id(vpx_codec_ctx_t *ctx, int layer) {
    return vpx_codec_control_(ctx, VP8E_SET_TEMPORAL_LAYER_ID, layer);
}
static inline vpx_codec_err_t rtc_vpx_get_last_quantizer(vpx_codec_ctx_t *ctx, int *q) {
    return vpx_codec_control_(ctx, VP8E_GET_LAST_QUANTIZER_64, q);
}
static inline unsigned long rtc_vpx_deadline_realtime(void) { return VPX_DL_REALTIME; }
static inline vpx_enc_frame_flags_t rtc_vpx_flag_force_kf(void) { return VPX_EFLAG_FORCE_KF; }
static inline vpx_codec_frame_flags_t rtc_vpx_frame_is_key(void) { return VPX_FRAME_IS_KEY; }
static inline vpx_codec_er_flags_t rtc_vpx_error_resilient_default(void) { return VPX_ERROR_RESILIENT_DEFAULT; }
static inline vpx_enc_frame_flags_t rtc_vp8_no_ref_golden_altref_upd(void) {
    // Temporal layer 1 frames: reference only the last base-layer frame, update nothing.
    return VP8_EFLAG_NO_REF_GF | VP8_EFLAG_NO_REF_ARF | VP8_EFLAG_NO_UPD_GF | VP8_EFLAG_NO_UPD_ARF |
           VP8_EFLAG_NO_UPD_LAST | VP8_EFLAG_NO_UPD_ENTROPY;
}
static inline vpx_enc_frame_flags_t rtc_vp8_base_layer_flags(void) {
    // Temporal layer 0 frames: reference and update only LAST.
    return VP8_EFLAG_NO_REF_GF | VP8_EFLAG_NO_REF_ARF | VP8_EFLAG_NO_UPD_GF | VP8_EFLAG_NO_UPD_ARF;
}
// Multi-resolution (simulcast) VP8, each level reusing the motion search of the level below (libvpx built with
// --enable-multi-res-encoding, as Debian's is): `count` contexts, configurations and down-sampling
// factors in contiguous arrays, full size first. dsf[i] is the factor from level i to level i + 1;
// the last one is not used but must still be valid (1/1).
static inline vpx_codec_err_t rtc_vpx_enc_init_multi(vpx_codec_ctx_t *ctx, vpx_codec_enc_cfg_t *cfg, int count,
                                                     vpx_rational_t *dsf) {
    return vpx_codec_enc_init_multi(ctx, vpx_codec_vp8_cx(), cfg, count, 0, dsf);
}
#endif
