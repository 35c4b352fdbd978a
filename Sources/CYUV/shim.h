// libyuv (Debian ships no .pc file): conversion, scaling and rotation of frames.
#ifndef RTC_CYUV_SHIM_H
#define RTC_CYUV_SHIM_H
#include <libyuv.h>
#endif
