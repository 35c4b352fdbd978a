#include "x11_capture.h"
#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/extensions/XShm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>

struct rtc_x11_capture {
    Display *display;
    Window root;
    XImage *image;
    XShmSegmentInfo shm;
    int x, y, width, height;
};

static int ignore_errors(Display *display, XErrorEvent *event) { (void)display; (void)event; return 0; }

rtc_x11_capture *rtc_x11_open(const char *name, int x, int y, int width, int height, char *error, int error_length) {
    Display *display = XOpenDisplay(name);
    if (!display) {
        snprintf(error, error_length, "cannot open X display %s", name ? name : "($DISPLAY)");
        return NULL;
    }
    if (!XShmQueryExtension(display)) {
        snprintf(error, error_length, "the X server has no MIT-SHM extension");
        XCloseDisplay(display);
        return NULL;
    }
    int screen = DefaultScreen(display);
    int screen_width = DisplayWidth(display, screen), screen_height = DisplayHeight(display, screen);
    if (width <= 0 || height <= 0) { x = 0; y = 0; width = screen_width; height = screen_height; }
    if (x < 0 || y < 0 || x + width > screen_width || y + height > screen_height) {
        snprintf(error, error_length, "region %dx%d+%d+%d is outside the %dx%d screen", width, height, x, y, screen_width, screen_height);
        XCloseDisplay(display);
        return NULL;
    }
    Visual *visual = DefaultVisual(display, screen);
    int depth = DefaultDepth(display, screen);
    if (depth != 24 && depth != 32) {
        snprintf(error, error_length, "screen depth %d is not supported (24 or 32)", depth);
        XCloseDisplay(display);
        return NULL;
    }
    rtc_x11_capture *capture = calloc(1, sizeof(*capture));
    capture->display = display;
    capture->root = RootWindow(display, screen);
    capture->x = x; capture->y = y; capture->width = width; capture->height = height;
    capture->image = XShmCreateImage(display, visual, depth, ZPixmap, NULL, &capture->shm, width, height);
    if (!capture->image || capture->image->bits_per_pixel != 32) {
        snprintf(error, error_length, "XShmCreateImage failed (or not 32 bits per pixel)");
        if (capture->image) XDestroyImage(capture->image);
        XCloseDisplay(display);
        free(capture);
        return NULL;
    }
    capture->shm.shmid = shmget(IPC_PRIVATE, capture->image->bytes_per_line * height, IPC_CREAT | 0600);
    capture->shm.shmaddr = capture->image->data = shmat(capture->shm.shmid, NULL, 0);
    capture->shm.readOnly = False;
    /* Marked for removal now: the segment goes away with the last detach, even if we crash. */
    shmctl(capture->shm.shmid, IPC_RMID, NULL);
    if (capture->shm.shmaddr == (char *)-1 || !XShmAttach(display, &capture->shm)) {
        snprintf(error, error_length, "cannot attach a shared memory segment to the X server");
        XCloseDisplay(display);
        free(capture);
        return NULL;
    }
    XSync(display, False);
    return capture;
}

int rtc_x11_width(const rtc_x11_capture *capture) { return capture->width; }
int rtc_x11_height(const rtc_x11_capture *capture) { return capture->height; }

const uint8_t *rtc_x11_grab(rtc_x11_capture *capture, int *stride) {
    if (!XShmGetImage(capture->display, capture->root, capture->image, capture->x, capture->y, AllPlanes)) return NULL;
    *stride = capture->image->bytes_per_line;
    return (const uint8_t *)capture->image->data;
}

void rtc_x11_close(rtc_x11_capture *capture) {
    if (!capture) return;
    XShmDetach(capture->display, &capture->shm);
    capture->image->data = NULL;
    XDestroyImage(capture->image);
    shmdt(capture->shm.shmaddr);
    XCloseDisplay(capture->display);
    free(capture);
}

int rtc_x11_paint_root(const char *name, const uint8_t *bgra, int width, int height, int stride) {
    Display *display = XOpenDisplay(name);
    if (!display) return -1;
    XSetErrorHandler(ignore_errors);
    int screen = DefaultScreen(display);
    Window root = RootWindow(display, screen);
    char *copy = malloc((size_t)stride * height);
    memcpy(copy, bgra, (size_t)stride * height);
    XImage *image = XCreateImage(display, DefaultVisual(display, screen), DefaultDepth(display, screen), ZPixmap, 0, copy,
                                 width, height, 32, stride);
    if (!image) { free(copy); XCloseDisplay(display); return -2; }
    GC gc = DefaultGC(display, screen);
    XPutImage(display, root, gc, image, 0, 0, 0, 0, width, height);
    XSync(display, False);
    XDestroyImage(image);
    XCloseDisplay(display);
    return 0;
}
