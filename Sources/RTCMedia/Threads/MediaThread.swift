#if canImport(Glibc)
import Glibc
#endif

/// A dedicated OS thread that runs jobs one at a time, in order: where one stream's encoding,
/// decoding or playout happens, away from the network event loop and Swift's cooperative pool.
///
/// An optional tick runs on the same thread at a fixed period (absolute deadlines on the monotonic
/// clock, so it does not drift): jitter-buffer timeouts and the audio playout clock use it.
public final class MediaThread: @unchecked Sendable {
    public let name: String
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var jobs: [() -> Void] = []
    /// The batch being run; swapped with `jobs` so a steady stream of jobs allocates nothing.
    private var running: [() -> Void] = []
    private var stopping = false
    private var finished = false
    private var thread: pthread_t?
    private let tickInterval: Int64?
    private let onTick: (() -> Void)?

    /// Starts the thread. With `tickIntervalUs`, `onTick` runs every that many microseconds.
    public init(name: String, tickIntervalUs: Int64? = nil, onTick: (() -> Void)? = nil) {
        self.name = name
        tickInterval = tickIntervalUs
        self.onTick = onTick
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
        let box = Unmanaged.passRetained(self).toOpaque()
        var handle = pthread_t()
        let status = pthread_create(&handle, nil, { argument in
            let thread = Unmanaged<MediaThread>.fromOpaque(argument!).takeRetainedValue()
            thread.run()
            return nil
        }, box)
        precondition(status == 0, "pthread_create failed: \(status)")
        thread = handle
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Queued jobs not yet started.
    public var backlog: Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return jobs.count
    }

    /// Queues a job; after `stop()` it is dropped.
    public func execute(_ job: @escaping () -> Void) {
        pthread_mutex_lock(mutex)
        if !stopping { jobs.append(job) }
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Queues a job unless `limit` jobs are already waiting; returns whether it was queued.
    /// Live video uses it: a frame that would wait behind two others is better dropped.
    public func execute(ifBacklogBelow limit: Int, _ job: @escaping () -> Void) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        guard !stopping, jobs.count < limit else { return false }
        jobs.append(job)
        pthread_cond_signal(condition)
        return true
    }

    /// Runs the jobs already queued, then ends the thread and waits for it. Idempotent.
    public func stop() {
        pthread_mutex_lock(mutex)
        let wasStopping = stopping
        stopping = true
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
        guard !wasStopping, let thread else { return }
        if pthread_equal(thread, pthread_self()) != 0 {
            pthread_detach(thread)
        } else {
            pthread_join(thread, nil)
        }
    }

    static func monotonicNowUs() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }

    private func run() {
        var nextTick = tickInterval.map { Self.monotonicNowUs() + $0 }
        pthread_mutex_lock(mutex)
        while true {
            if !jobs.isEmpty {
                swap(&jobs, &running)
                pthread_mutex_unlock(mutex)
                for job in running { job() }
                running.removeAll(keepingCapacity: true)
                pthread_mutex_lock(mutex)
                continue
            }
            if stopping { break }
            if let deadline = nextTick, let interval = tickInterval {
                if Self.monotonicNowUs() >= deadline {
                    pthread_mutex_unlock(mutex)
                    onTick?()
                    // Behind by more than a period (a stalled machine): skip ahead instead of bursting.
                    let now = Self.monotonicNowUs()
                    nextTick = deadline + interval < now - interval ? now + interval : deadline + interval
                    pthread_mutex_lock(mutex)
                    continue
                }
                var wake = timespec(tv_sec: Int(deadline / 1_000_000), tv_nsec: Int(deadline % 1_000_000) * 1000)
                pthread_cond_timedwait(condition, mutex, &wake)
            } else {
                pthread_cond_wait(condition, mutex)
            }
        }
        finished = true
        pthread_mutex_unlock(mutex)
    }
}
