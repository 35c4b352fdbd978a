#ifndef RTC_X11_CAPTURE_H
#define RTC_X11_CAPTURE_H
#include <stdint.h>

/* Screen capture over Xlib + the MIT-SHM extension (XShmGetImage into one shared segment). */
typedef struct rtc_x11_capture rtc_x11_capture;

/* Opens `display` (NULL: $DISPLAY) and prepares to capture the region (x, y, width, height) of the
   root window; width or height 0 means the whole screen. On failure returns NULL and writes a
   message into `error`. */
rtc_x11_capture *rtc_x11_open(const char *display, int x, int y, int width, int height, char *error, int error_length);
int rtc_x11_width(const rtc_x11_capture *capture);
int rtc_x11_height(const rtc_x11_capture *capture);
/* Captures the region; returns BGRA pixels (valid until the next call) and their row stride, or NULL. */
const uint8_t *rtc_x11_grab(rtc_x11_capture *capture, int *stride);
void rtc_x11_close(rtc_x11_capture *capture);

/* Test helper: paints BGRA pixels onto the root window of `display` at (0, 0) and flushes. */
int rtc_x11_paint_root(const char *display, const uint8_t *bgra, int width, int height, int stride);

#endif
