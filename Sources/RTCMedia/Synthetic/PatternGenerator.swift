#if canImport(Glibc)
import Glibc
#endif

/// What a synthetic clip looks like.
public enum PatternKind: String, Sendable, Hashable, CaseIterable {
    /// Camera-like: a textured scene panning slowly, with moving objects.
    case camera
    /// Screen-like: a desktop with a window of text that scrolls, a blinking caret and a moving pointer.
    case screen
}

/// Makes deterministic synthetic I420 clips for tests, demos and benchmarks. Frames depend only on
/// the kind, size and frame index, so a clip can be regenerated to compare against.
public final class PatternGenerator {
    public let kind: PatternKind
    public let size: VideoSize
    public let frameRate: FrameRate
    private let pool: VideoFramePool
    private let scene: Scene

    /// Fails for sizes that are not even or are outside 16...16382.
    public init(kind: PatternKind, size: VideoSize, frameRate: FrameRate = FrameRate(30)) throws(MediaFileError) {
        guard size.width % 2 == 0, size.height % 2 == 0, (16...16382).contains(size.width),
              (16...16382).contains(size.height)
        else {
            throw MediaFileError(.invalidArgument,
                                 "pattern size \(size) must have even width and height between 16 and 16382")
        }
        self.kind = kind
        self.size = size
        self.frameRate = frameRate
        pool = VideoFramePool(format: .i420, width: size.width, height: size.height, capacity: 4)!
        scene = kind == .camera ? CameraScene(size: size) : ScreenScene(size: size, frameRate: frameRate)
    }

    /// Frame number `index` of the clip.
    public func frame(at index: Int) -> VideoFrame {
        let buffer = pool.makeBuffer()
        scene.draw(frame: index, into: buffer)
        return VideoFrame(buffer: buffer, timestampUs: Int64(index) * frameRate.frameDurationUs)
    }
}

/// A deterministic pseudo-random sequence (xorshift), so clips are the same on every machine.
struct PatternRandom {
    var state: UInt64
    mutating func next() -> UInt64 {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return state
    }
    mutating func next(below bound: Int) -> Int { Int(next() % UInt64(bound)) }
}

protocol Scene: Sendable {
    func draw(frame: Int, into buffer: VideoBuffer)
}

/// An image plane kept in memory, larger than the frame so it can be panned or scrolled.
struct Canvas: Sendable {
    let width: Int
    let height: Int
    var pixels: [UInt8]

    init(width: Int, height: Int, fill: UInt8) {
        self.width = width
        self.height = height
        pixels = [UInt8](repeating: fill, count: width * height)
    }

    mutating func fill(x: Int, y: Int, width w: Int, height h: Int, value: UInt8) {
        let x0 = max(0, x), x1 = min(width, x + w), y0 = max(0, y), y1 = min(height, y + h)
        guard x0 < x1, y0 < y1 else { return }
        pixels.withUnsafeMutableBufferPointer { p in
            for row in y0..<y1 { memset(p.baseAddress! + row * width + x0, Int32(value), x1 - x0) }
        }
    }

    /// Copies a `w`x`h` window at (`sx`, `sy`) into plane `plane` of `buffer` at (`dx`, `dy`).
    func blit(into buffer: VideoBuffer, plane: Int, sx: Int, sy: Int, dx: Int, dy: Int, w: Int, h: Int) {
        let stride = buffer.stride(plane)
        let target = buffer.planeBase(plane)
        pixels.withUnsafeBufferPointer { p in
            for row in 0..<h {
                memcpy(target + (dy + row) * stride + dx, p.baseAddress! + (sy + row) * width + sx, w)
            }
        }
    }
}

extension VideoBuffer {
    /// Fills a rectangle of one plane with a value, clipped to the plane.
    func fill(plane: Int, x: Int, y: Int, width w: Int, height h: Int, value: UInt8) {
        let layout = self.layout.planes[plane]
        let x0 = max(0, x), x1 = min(layout.rowBytes, x + w), y0 = max(0, y), y1 = min(layout.rows, y + h)
        guard x0 < x1, y0 < y1 else { return }
        let base = planeBase(plane)
        for row in y0..<y1 { memset(base + row * layout.stride + x0, Int32(value), x1 - x0) }
    }

    /// Fills a disc in all three I420 planes.
    func fillDisc(cx: Int, cy: Int, radius: Int, y: UInt8, u: UInt8, v: UInt8) {
        for dy in -radius...radius {
            let half = Int(Double(radius * radius - dy * dy).squareRoot())
            fill(plane: 0, x: cx - half, y: cy + dy, width: 2 * half + 1, height: 1, value: y)
            if (cy + dy) % 2 == 0 {
                fill(plane: 1, x: (cx - half) / 2, y: (cy + dy) / 2, width: half + 1, height: 1, value: u)
                fill(plane: 2, x: (cx - half) / 2, y: (cy + dy) / 2, width: half + 1, height: 1, value: v)
            }
        }
    }
}

/// A textured landscape panning back and forth, with three discs moving across it.
struct CameraScene: Scene {
    let size: VideoSize
    let margin: Int
    let planes: [Canvas]

    init(size: VideoSize) {
        self.size = size
        margin = max(32, min(size.width, size.height) / 4) & ~1
        let w = size.width + 2 * margin, h = size.height + 2 * margin
        var random = PatternRandom(state: 0x9E37_79B9_7F4A_7C15)
        let noise = (0..<4096).map { _ in Int(random.next() % 17) - 8 }
        let sinX = (0..<w).map { sin(Double($0) * 0.021) }
        let cosY = (0..<h).map { cos(Double($0) * 0.033) }
        let diagonal = (0..<(w + h)).map { sin(Double($0) * 0.13) }
        var luma = Canvas(width: w, height: h, fill: 0)
        luma.pixels.withUnsafeMutableBufferPointer { p in
            for y in 0..<h {
                for x in 0..<w {
                    let value = 118 + 55 * sinX[x] * cosY[y] + 22 * diagonal[x + y] + Double(noise[(y & 63) << 6 | (x & 63)])
                    p[y * w + x] = UInt8(max(16, min(235, value)))
                }
            }
        }
        var u = Canvas(width: w / 2, height: h / 2, fill: 0)
        var v = Canvas(width: w / 2, height: h / 2, fill: 0)
        for y in 0..<(h / 2) {
            for x in 0..<(w / 2) {
                u.pixels[y * (w / 2) + x] = UInt8(128 + 30 * sin(Double(x) * 0.017 + Double(y) * 0.011))
                v.pixels[y * (w / 2) + x] = UInt8(128 + 30 * cos(Double(x) * 0.013 - Double(y) * 0.019))
            }
        }
        planes = [luma, u, v]
    }

    func draw(frame: Int, into buffer: VideoBuffer) {
        // Pan along a triangle wave so the clip can be any length.
        func triangle(_ t: Int, _ span: Int) -> Int {
            let period = 2 * span
            let phase = t % period
            return phase < span ? phase : period - phase
        }
        let ox = triangle(frame * 2, 2 * margin) & ~1
        let oy = triangle(frame, 2 * margin) & ~1
        planes[0].blit(into: buffer, plane: 0, sx: ox, sy: oy, dx: 0, dy: 0, w: size.width, h: size.height)
        planes[1].blit(into: buffer, plane: 1, sx: ox / 2, sy: oy / 2, dx: 0, dy: 0, w: size.width / 2, h: size.height / 2)
        planes[2].blit(into: buffer, plane: 2, sx: ox / 2, sy: oy / 2, dx: 0, dy: 0, w: size.width / 2, h: size.height / 2)
        let t = Double(frame)
        let r = max(4, size.height / 10)
        let discs: [(Double, Double, UInt8, UInt8, UInt8)] = [
            (0.5 + 0.35 * sin(t * 0.05), 0.5 + 0.3 * cos(t * 0.07), 80, 90, 200),
            (0.5 + 0.4 * cos(t * 0.03), 0.5 + 0.35 * sin(t * 0.045), 200, 60, 140),
            (0.5 + 0.3 * sin(t * 0.08 + 1), 0.5 + 0.25 * sin(t * 0.06 + 2), 150, 180, 70),
        ]
        for (x, y, luma, u, v) in discs {
            buffer.fillDisc(cx: Int(x * Double(size.width)), cy: Int(y * Double(size.height)), radius: r,
                            y: luma, u: u, v: v)
        }
    }
}

/// A desktop: a window with a title bar, a sidebar and a page of text that scrolls by a line every
/// two seconds, a blinking caret and a mouse pointer gliding across.
struct ScreenScene: Scene {
    let size: VideoSize
    let framesPerScroll: Int
    let caretPeriod: Int
    let window: (x: Int, y: Int, w: Int, h: Int)
    let titleHeight: Int
    let sidebarWidth: Int
    let lineHeight = 16
    /// The text page, taller than the window, kept as where each glyph goes rather than as pixels
    /// (a 1080p page would be 7 MB, which is a sixth of the sharer's budget).
    let pageHeight: Int
    let glyphs: [[UInt8]]
    let placements: [GlyphPlacement]

    struct GlyphPlacement: Sendable {
        let x: Int32
        let baseline: Int32
        let glyph: UInt8
        let highlighted: Bool
    }

    init(size: VideoSize, frameRate: FrameRate) {
        self.size = size
        let fps = max(1, Int(frameRate.framesPerSecond.rounded()))
        framesPerScroll = 2 * fps
        caretPeriod = max(2, fps / 2)
        window = (size.width / 16 & ~1, size.height / 12 & ~1, size.width * 7 / 8 & ~1, size.height * 5 / 6 & ~1)
        titleHeight = max(8, size.height / 30) & ~1
        sidebarWidth = window.w / 5 & ~1
        let pageWidth = window.w - sidebarWidth
        pageHeight = (window.h - titleHeight) * 4
        var random = PatternRandom(state: 0xD1B5_4A32_D192_ED03)
        // Sixteen 6x10 glyphs made of strokes, so the page reads like text to an encoder.
        glyphs = (0..<16).map { _ in
            var cells = [UInt8](repeating: 0, count: 60)
            for _ in 0..<3 {
                if random.next(below: 2) == 0 {
                    let column = random.next(below: 6), top = random.next(below: 4)
                    for row in top..<min(10, top + 4 + random.next(below: 6)) { cells[row * 6 + column] = 1 }
                } else {
                    let row = 2 + random.next(below: 8)
                    for column in 0..<(2 + random.next(below: 4)) { cells[row * 6 + column] = 1 }
                }
            }
            return cells
        }
        var placements: [GlyphPlacement] = []
        var baseline = 4
        while baseline + lineHeight < pageHeight {
            var x = 8 + (random.next(below: 4) == 0 ? 24 : 0)
            let lineEnd = pageWidth - 8 - random.next(below: pageWidth / 3)
            while x < lineEnd {
                let letters = 2 + random.next(below: 8)
                let highlighted = random.next(below: 7) == 0
                for _ in 0..<letters where x + 8 < lineEnd {
                    placements.append(GlyphPlacement(x: Int32(x), baseline: Int32(baseline), glyph: UInt8(random.next(below: 16)),
                                                     highlighted: highlighted))
                    x += 8
                }
                x += 8
            }
            baseline += lineHeight
        }
        self.placements = placements
    }

    /// Draws the page rows `scroll ..< scroll + height` at (`left`, `top`): paper, glyphs, and the
    /// chroma of highlighted words.
    private func drawPage(into buffer: VideoBuffer, scroll: Int, left: Int, top: Int, width: Int, height: Int) {
        buffer.fill(plane: 0, x: left, y: top, width: width, height: height, value: 235)
        buffer.fill(plane: 1, x: left / 2, y: top / 2, width: width / 2, height: height / 2, value: 128)
        buffer.fill(plane: 2, x: left / 2, y: top / 2, width: width / 2, height: height / 2, value: 128)
        let luma = buffer.planeBase(0), lumaStride = buffer.stride(0)
        for placement in placements {
            let baseline = Int(placement.baseline), x = Int(placement.x)
            guard baseline + 10 > scroll, baseline < scroll + height else { continue }
            let glyph = glyphs[Int(placement.glyph)]
            let ink: UInt8 = placement.highlighted ? 70 : 30
            for row in 0..<10 where (scroll..<scroll + height).contains(baseline + row) {
                let line = luma + (top + baseline + row - scroll) * lumaStride + left + x
                for column in 0..<6 where glyph[row * 6 + column] == 1 { line[column] = ink }
            }
            if placement.highlighted {
                for (plane, value) in [(1, UInt8(190)), (2, UInt8(100))] {
                    let base = buffer.planeBase(plane), stride = buffer.stride(plane)
                    for row in baseline / 2..<baseline / 2 + 5 where (scroll / 2..<scroll / 2 + height / 2).contains(row) {
                        let line = base + (top / 2 + row - scroll / 2) * stride + left / 2 + x / 2
                        for column in 0..<4 { line[column] = value }
                    }
                }
            }
        }
    }

    func draw(frame: Int, into buffer: VideoBuffer) {
        // Desktop background and window chrome.
        buffer.fill(plane: 0, x: 0, y: 0, width: size.width, height: size.height, value: 90)
        buffer.fill(plane: 1, x: 0, y: 0, width: size.width / 2, height: size.height / 2, value: 150)
        buffer.fill(plane: 2, x: 0, y: 0, width: size.width / 2, height: size.height / 2, value: 110)
        buffer.fill(plane: 0, x: window.x, y: window.y, width: window.w, height: titleHeight, value: 50)
        buffer.fill(plane: 1, x: window.x / 2, y: window.y / 2, width: window.w / 2, height: titleHeight / 2, value: 140)
        buffer.fill(plane: 2, x: window.x / 2, y: window.y / 2, width: window.w / 2, height: titleHeight / 2, value: 120)
        let contentY = window.y + titleHeight
        let contentH = window.h - titleHeight
        buffer.fill(plane: 0, x: window.x, y: contentY, width: sidebarWidth, height: contentH, value: 200)
        buffer.fill(plane: 1, x: window.x / 2, y: contentY / 2, width: sidebarWidth / 2, height: contentH / 2, value: 128)
        buffer.fill(plane: 2, x: window.x / 2, y: contentY / 2, width: sidebarWidth / 2, height: contentH / 2, value: 128)
        for item in 0..<(contentH / 24) {
            buffer.fill(plane: 0, x: window.x + 10, y: contentY + 8 + item * 24, width: sidebarWidth - 20 - (item * 7) % 40,
                        height: 8, value: item == 2 ? 120 : 150)
        }
        // Page text, scrolled by whole lines.
        let maxScroll = pageHeight - contentH
        let scroll = min(maxScroll, (frame / framesPerScroll) * lineHeight % max(lineHeight, maxScroll)) & ~1
        let pageX = window.x + sidebarWidth
        let pageW = window.w - sidebarWidth
        drawPage(into: buffer, scroll: scroll, left: pageX, top: contentY, width: pageW, height: contentH)
        // Caret.
        if (frame / caretPeriod) % 2 == 0 {
            buffer.fill(plane: 0, x: pageX + pageW / 2, y: contentY + 4 * lineHeight + 2, width: 2, height: 12, value: 16)
        }
        // Pointer: a small arrow moving along a slow diagonal path.
        let period = 300
        let phase = Double(frame % period) / Double(period)
        let px = window.x + Int(Double(window.w - 20) * phase)
        let py = window.y + Int(Double(window.h - 20) * (0.5 + 0.4 * sin(phase * 6.283)))
        for row in 0..<14 {
            buffer.fill(plane: 0, x: px, y: py + row, width: max(1, row * 2 / 3), height: 1, value: row == 13 ? 16 : 250)
        }
    }
}
