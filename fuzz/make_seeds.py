#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the fuzzers' seed inputs into fuzz/corpus/<fuzzer>/seed-*, deterministically.

    fuzz/make_seeds.py            (re)writes every seed-* file; other corpus files stay

The corpora checked in are these seeds plus what long runs found and `fuzz/run.py merge`
kept (named by their SHA-1). Seeds are structured where structure matters: real
ClientHellos (Python's ssl, i.e. OpenSSL, through memory BIOs) for the TLS fuzzer, scripted
programs for the others; the rest is random bytes from fixed seeds.
"""
import os
import random
import ssl
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write(fuzzer, seeds):
    directory = os.path.join(HERE, "corpus", fuzzer)
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.startswith("seed-"):
            os.remove(os.path.join(directory, name))
    for index, data in enumerate(seeds):
        with open(os.path.join(directory, "seed-%03d" % index), "wb") as file:
            file.write(data)
    print(f"{fuzzer}: {len(seeds)} seeds")


def random_inputs(seed, count, low, high):
    generator = random.Random(seed)
    return [bytes(generator.randrange(256) for _ in range(generator.randrange(low, high))) for _ in range(count)]


def client_hello(**options):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if "minimum" in options:
        context.minimum_version = options["minimum"]
    if "maximum" in options:
        context.maximum_version = options["maximum"]
    if "alpn" in options:
        context.set_alpn_protocols(options["alpn"])
    if "ciphers" in options:
        context.set_ciphers(options["ciphers"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    connection = context.wrap_bio(incoming, outgoing, server_hostname=options.get("sni"))
    try:
        connection.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def tls_seeds():
    # Input: a mode byte (mode = byte % 6: 0 close, 1 reset, 2 hold open, 3 half-close,
    # 4 flood, 5 a real client (handshake, the bytes as lines, then a reset when bit 6 is
    # set, else a close); byte >> 3: chunk size / 7, 0 = all at once), then the bytes sent.
    v = ssl.TLSVersion
    variants = [{}, {"sni": "localhost"}, {"minimum": v.TLSv1_2, "maximum": v.TLSv1_2}, {"minimum": v.TLSv1_3},
                {"alpn": ["h2", "http/1.1"]}, {"sni": ".".join(["a" * 60] * 3)},
                {"ciphers": "ECDHE-RSA-AES128-GCM-SHA256", "maximum": v.TLSv1_2}, {"alpn": ["x" * 255]},
                {"sni": "localhost", "alpn": ["h2"], "minimum": v.TLSv1_3}]
    seeds = []
    for options in variants:
        hello = client_hello(**options)
        for mode in range(5):
            for chunk in (0, 1, 5):
                seeds.append(bytes([mode | chunk << 3]) + hello)
    hello = client_hello(sni="localhost")
    for cut in (1, 3, 5, 6, 9, 40, len(hello) - 1):                 # truncated
        seeds.append(bytes([len(seeds) % 5]) + hello[:cut])
    for record_type in (20, 21, 23, 24, 0, 255):                     # odd record types
        seeds.append(bytes([4]) + bytes([record_type]) + hello[1:])
    seeds.append(bytes([0]) + hello[:3] + b"\xff\xff" + hello[5:])   # a record longer than allowed
    seeds.append(bytes([2]) + hello[:3] + b"\x00\x00")               # an empty record
    seeds.append(bytes([2]) + hello[:9] + b"\xff\xff" + hello[11:])  # a handshake longer than its record
    seeds.append(bytes([2]) + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not TLS
    seeds.append(bytes([2]))                                         # no ClientHello at all
    seeds.append(bytes([3]) + hello + hello)                         # two hellos
    seeds.append(bytes([4]) + b"\x17\x03\x03\x40\x00" + bytes(16384))  # application data before the handshake
    # Real clients: many lines in one record, then a reset (0x45 % 6 == 5, bit 6 set) or a close.
    generator = random.Random(38)
    for count in (2, 8, 64, 400):
        lines = b"".join(b"line %d " % i + bytes(generator.randrange(1, 255) for _ in range(generator.randrange(0, 20)))
                         + b"\x10" for i in range(count))
        seeds.append(bytes([0x45]) + lines[:4000])
        seeds.append(bytes([0x05]) + lines[:4000])
    return seeds


def framing_seeds():
    # The first bytes (flags, read-length limit, alphabet, stream length, PRNG seed) vary;
    # the rest is a script the fuzzer reads as operations.
    seeds = random_inputs(34, 160, 40, 400)
    generator = random.Random(35)
    for flags in range(64):
        header = bytes([flags, generator.randrange(4) + 1, generator.randrange(4), generator.randrange(8)])
        header += bytes([generator.randrange(12), generator.randrange(256)]) + bytes(generator.randrange(256) for _ in range(4))
        seeds.append(header + bytes(generator.randrange(256) for _ in range(generator.randrange(60, 300))))
    return seeds


def capi_seeds():
    seeds = random_inputs(36, 120, 30, 600)
    # The release-under-fire macro operation (issues 26.3 and 26.4): op 0 (create) case 15.
    for rounds in range(3):
        seeds.append(bytes([0, 15, rounds]) * 8)
    # Objects released after their group (26.5): op 0 case 14, then a slot and two orders.
    for order in range(4):
        seeds.append(bytes([0, 14, 2 + order, order % 2, order // 2]) * 8)
    return seeds


def parse_seeds():
    seeds = random_inputs(37, 200, 4, 200)
    # PROXY protocol headers (op 7): each mode and template, then random choices.
    generator = random.Random(38)
    for index in range(24):
        choices = bytes(generator.randrange(256) for _ in range(generator.randrange(20, 300)))
        seeds.append(bytes([7, index % 3, index // 3 % 6]) + choices)
    return seeds


def main():
    which = sys.argv[1:] or ["framing", "capi", "tls", "parse"]
    makers = {"framing": framing_seeds, "capi": capi_seeds, "tls": tls_seeds, "parse": parse_seeds}
    for name in which:
        write(name, makers[name]())


if __name__ == "__main__":
    main()
