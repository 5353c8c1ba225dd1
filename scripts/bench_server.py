"""A release binary serving on the embedded store for the scripts that compare two binaries
side by side (scripts/bench-decision-memory, scripts/bench-decision-fairness): started afresh
on a new data folder under target/bench-data, with auth off, and called as a client would."""

import json
import os
import shutil
import subprocess
import time
import urllib.request


class Server:
    def __init__(self, binary: str, port: int, name: str, *options: str):
        self.data = os.path.join("target", "bench-data", f"{name}-{port}")
        shutil.rmtree(self.data, ignore_errors=True)
        self.process = subprocess.Popen(
            [binary, "serve", "--data-dir", self.data, "--listen", f"127.0.0.1:{port}",
             "--auth", "off", *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(self.base + "/readyz", timeout=1)
                return
            except OSError:
                time.sleep(0.2)

    def call(self, method: str, path: str, body=None):
        payload = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=payload, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as answer:
            return json.loads(answer.read() or b"null")

    def conversions_decided(self, advertiser: str) -> int:
        day = time.strftime("%Y-%m-%d", time.gmtime())
        answer = self.call("GET", f"/v1/advertisers/{advertiser}/conversions"
                           f"?from={day}&to={day}&group_by=none")
        return answer["totals"]["conversions"]

    def resident_mb(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024
        return 0

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.data, ignore_errors=True)
