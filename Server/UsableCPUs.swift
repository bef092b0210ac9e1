import Foundation
import NIOCore

/// How many CPUs this process may run on: the fewest of NIO's count (the machine's cores, a
/// cgroup's cpuset or CPU quota) and the CPU affinity mask (`taskset`, `docker --cpuset-cpus`),
/// which NIO does not read. `duplex-server` starts that many event loops unless `--event-loops`
/// says otherwise: two loops on one allowed core only take turns.
enum UsableCPUs {
    static func count() -> Int {
        let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        return max(1, min(System.coreCount, status.flatMap(affinityCount(status:)) ?? Int.max))
    }

    /// The CPUs in the affinity mask, from `/proc/self/status`'s `Cpus_allowed_list` ("0-3,6");
    /// nil when it is not there (not Linux) or does not parse.
    static func affinityCount(status: String) -> Int? {
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Cpus_allowed_list:") }) else { return nil }
        var count = 0
        for range in line.dropFirst("Cpus_allowed_list:".count).trimmingCharacters(in: .whitespaces).split(separator: ",") {
            let bounds = range.split(separator: "-").map { Int($0) }
            switch bounds.count {
            case 1:
                guard bounds[0] != nil else { return nil }
                count += 1
            case 2:
                guard let low = bounds[0], let high = bounds[1], high >= low else { return nil }
                count += high - low + 1
            default:
                return nil
            }
        }
        return count > 0 ? count : nil
    }
}
