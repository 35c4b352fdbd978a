// Published SRTP / SRTCP test vectors, as data only (no tests here).
//
// Every value is a hex string; whitespace inside a string is insignificant, so
// decode with `SRTPVectors.bytes(_:)`. Where a source prints a value across
// several lines the line breaks are kept.
//
// Sources:
//   RFC 3711  https://www.rfc-editor.org/rfc/rfc3711  (Appendix B.2, B.3)
//   RFC 6188  https://www.rfc-editor.org/rfc/rfc6188  (Section 7.1, 7.2)
//   RFC 7714  https://www.rfc-editor.org/rfc/rfc7714  (Sections 16, 17)
//   libsrtp   https://github.com/cisco/libsrtp  test/srtp_driver.c
//             (srtp_validate, srtp_validate_aes_256, srtp_validate_gcm)
//
// RFC 3711 values were read from a copy of the RFC text. RFC 6188 and RFC 7714
// values were read from implementations that embed them (pion/srtp
// key_derivation_test.go, srtp_cipher_aes_cm_hmac_sha1_rfc_test.go,
// srtp_cipher_aead_aes_gcm_rfc_test.go, cross-checked against other public
// copies). Every output below was also recomputed from its inputs with OpenSSL
// (AES-CTR / AES-GCM / HMAC-SHA1) when this file was written.

enum SRTPVectors {
    /// Decodes a hex string, skipping spaces, tabs and line breaks.
    /// Traps on any other character or on an odd number of digits.
    static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8?
        for c in hex.utf8 {
            let nibble: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = c - UInt8(ascii: "A") + 10
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                continue
            default:
                preconditionFailure("SRTPVectors.bytes: invalid character \(c) in hex string")
            }
            if let h = high {
                out.append(h << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        precondition(high == nil, "SRTPVectors.bytes: odd number of hex digits")
        return out
    }

    // MARK: - RFC 3711 Appendix B.2 (AES-CM keystream, AES-128)

    /// RFC 3711 Appendix B.2, "AES-CM Test Vectors".
    /// The session key/salt are used directly (no key derivation). ROC, SEQ and
    /// SSRC are all zero, so the first counter block is just the salt shifted
    /// left 16 bits; block i uses counter `initialCounter + i`. The keystream is
    /// what AES-CM produces over zero plaintext.
    enum RFC3711AESCM {
        static let sessionKey = "2B7E151628AED2A6ABF7158809CF4F3C"
        /// The 14-octet session salt (the RFC prints it already shifted, see `initialCounter`).
        static let sessionSalt = "F0F1F2F3F4F5F6F7F8F9FAFBFCFD"
        static let rolloverCounter: UInt32 = 0x0000_0000
        static let sequenceNumber: UInt16 = 0x0000
        static let ssrc: UInt32 = 0x0000_0000
        /// "Session Salt ... (already shifted)" and "Offset" in the RFC: salt * 2^16.
        static let initialCounter = "F0F1F2F3F4F5F6F7F8F9FAFBFCFD0000"
        /// Keystream blocks for counters ...0000, ...0001, ...0002.
        static let keystreamFirstBlocks = """
            E03EAD0935C95E80E166B16DD92B4EB4
            D23513162B02D0F72A43A2FE4A5F97AB
            41E95B3BB0A2E8DD477901E4FCA894C0
            """
        /// Whole keystream segment: 1,044,512 octets = 65,282 AES blocks (counters ...0000 to ...FF01).
        static let keystreamSegmentLength = 1_044_512
        /// Counters of the last three blocks of the segment.
        static let lastCounters = [
            "F0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF",
            "F0F1F2F3F4F5F6F7F8F9FAFBFCFDFF00",
            "F0F1F2F3F4F5F6F7F8F9FAFBFCFDFF01",
        ]
        /// Keystream blocks for `lastCounters` (the final 48 octets of the segment).
        static let keystreamLastBlocks = """
            EC8CDF7398607CB0F2D21675EA9EA1E4
            362B7C3C6773516318A077D7FC5073AE
            6A2CC3787889374FBEB4C81B17BA6C44
            """
    }

    // MARK: - RFC 3711 Appendix B.3 (key derivation, AES-128)

    /// RFC 3711 Appendix B.3, "Key Derivation Test Vectors".
    /// Initial derivation, key_derivation_rate = 0, so (index DIV kdr) = 0.
    /// PRF input block = (master salt XOR (label << 48)) * 2^16, then AES-CM
    /// under the master key. Labels: 0x00 cipher key, 0x01 auth key, 0x02 salt
    /// (the SRTP labels; the RFC gives no SRTCP-label vectors).
    enum RFC3711KeyDerivation {
        static let masterKey = "E1F97A0D3E018BE0D64FA32C06DE4139"
        static let masterSalt = "0EC675AD498AFEEBB6960B3AABE6"

        /// Label 0x00: AES-CM input block and the 16-octet session cipher key.
        static let cipherKeyInputBlock = "0EC675AD498AFEEBB6960B3AABE60000"
        static let cipherKey = "C61E7A93744F39EE10734AFE3FF7A087"

        /// Label 0x02: AES-CM input block, the full 16-octet AES output, and the
        /// 14-octet session salt (the first 14 octets of that output).
        static let cipherSaltInputBlock = "0EC675AD498AFEE9B6960B3AABE60000"
        static let cipherSaltFullBlock = "30CBBC08863D8C85D49DB34A9AE17AC6"
        static let cipherSalt = "30CBBC08863D8C85D49DB34A9AE1"

        /// Label 0x01: AES-CM input block of the first auth-key block.
        static let authKeyInputBlock = "0EC675AD498AFEEAB6960B3AABE60000"
        /// The RFC walks the auth-key keystream out to 94 octets
        /// (counters ...0000 to ...0005, last block truncated to 14 octets).
        static let authKeyStream94 = """
            CEBE321F6FF7716B6FD4AB49AF256A15
            6D38BAA48F0A0ACF3C34E2359E6CDBCE
            E049646C43D9327AD175578EF7227098
            6371C10C9A369AC2F94A8C5FBCDDDC25
            6D6E919A48B610EF17C2041E47403576
            6B68642C59BBFC2F34DB60DBDFB2
            """
        /// The 20-octet (160-bit) HMAC-SHA1 session auth key actually used by
        /// AES_CM_128_HMAC_SHA1_80/_32: the first 20 octets of `authKeyStream94`.
        static let authKey = "CEBE321F6FF7716B6FD4AB49AF256A156D38BAA4"
    }

    // MARK: - RFC 6188 Section 7 (AES-256)

    /// RFC 6188 Section 7.1, "AES-256-CM Test Vectors".
    /// Same layout as RFC 3711 B.2 (same counter, zero ROC/SEQ/SSRC), 256-bit
    /// session key used directly.
    enum RFC6188AES256CM {
        static let sessionKey = """
            57f82fe3613fd170a85ec93c40b1f092
            2ec4cb0dc025b58272147cc438944a98
            """
        static let sessionSalt = "f0f1f2f3f4f5f6f7f8f9fafbfcfd"
        static let initialCounter = "f0f1f2f3f4f5f6f7f8f9fafbfcfd0000"
        /// Keystream blocks for counters ...0000, ...0001, ...0002.
        static let keystreamFirstBlocks = """
            92bdd28a93c3f52511c677d08b5515a4
            9da71b2378a854f67050756ded165bac
            63c4868b7096d88421b563b8c94c9a31
            """
        /// Same segment length as RFC 3711 B.2: 65,282 blocks.
        static let keystreamSegmentLength = 1_044_512
        /// Keystream blocks for counters ...FEFF, ...FF00, ...FF01.
        static let keystreamLastBlocks = """
            cea518c90fd91ced9cbb18c078a54711
            3dbc4814f4da5f00a08772b63c6a046d
            6eb246913062a16891433e97dd01a57f
            """
    }

    /// RFC 6188 Section 7.2, "AES_256_CM_PRF Test Vectors" (key derivation with a
    /// 32-octet master key and the usual 14-octet master salt; kdr = 0, index 0).
    /// Labels 0x00 / 0x01 / 0x02 as in RFC 3711.
    enum RFC6188KeyDerivation {
        static let masterKey = """
            f0f04914b513f2763a1b1fa130f10e29
            98f6f6e43e4309d1e622a0e332b9f1b6
            """
        static let masterSalt = "3b04803de51ee7c96423ab5b78d2"
        /// Label 0x00, 32 octets.
        static let cipherKey = """
            5ba1064e30ec51613cad926c5a28ef73
            1ec7fb397f70a960653caf06554cd8c4
            """
        /// Label 0x02, 14 octets.
        static let cipherSalt = "fa31791685ca444a9e07c6c64e93"
        /// Label 0x01, first 20 octets (HMAC-SHA1 key).
        static let authKey = "fd9c32d39ed5fbb5a9dc96b30818454d1313dc05"
    }

    // MARK: - RFC 7714 Section 16 (SRTP, AEAD AES-GCM)

    /// RFC 7714 Section 16, "Test Vectors for SRTP" — common inputs.
    ///
    /// These vectors use the *session* key and *session* salt directly: there is
    /// no key derivation step. The same key/salt are also used for the SRTCP
    /// vectors in Section 17.
    ///
    /// IV = (0x0000 || SSRC || ROC || SEQ) XOR salt (12 octets). AAD = the
    /// 12-octet RTP header. Output = header || ciphertext || 16-octet tag.
    enum RFC7714 {
        static let key128 = "000102030405060708090a0b0c0d0e0f"
        static let key256 = """
            000102030405060708090a0b0c0d0e0f
            101112131415161718191a1b1c1d1e1f
            """
        /// 12 octets; ASCII "Quid pro quo".
        static let salt = "517569642070726f2071756f"

        // RTP packet: V=2, PT=0x40, SEQ=0xf17b, TS=0x8041f8d3, SSRC=0x5501a0b2, ROC=0.
        static let rtpSSRC: UInt32 = 0x5501_a0b2
        static let rtpSequenceNumber: UInt16 = 0xf17b
        static let rtpRolloverCounter: UInt32 = 0
        /// The plaintext RTP packet: 12-octet header + 38-octet payload
        /// (ASCII "Gallia est omnis divisa in partes tres").
        static let rtpPacket = """
            8040f17b 8041f8d3 5501a0b2 47616c6c
            69612065 7374206f 6d6e6973 20646976
            69736120 696e2070 61727465 73207472
            6573
            """
        /// AAD for encryption: the RTP header.
        static let rtpAAD = "8040f17b 8041f8d3 5501a0b2"
        static let rtpPayload = """
            47616c6c 69612065 7374206f 6d6e6973
            20646976 69736120 696e2070 61727465
            73207472 6573
            """
        /// 0x0000 || SSRC || ROC || SEQ, before XOR with the salt.
        static let rtpIVInput = "0000 5501a0b2 00000000 f17b"
        /// The 12-octet GCM nonce (shared by the 128- and 256-bit vectors).
        static let rtpIV = "51753c6580c2726f20718414"

        /// RFC 7714 Section 16.1.1, AEAD_AES_128_GCM SRTP encryption:
        /// header || ciphertext (38) || tag (16).
        static let srtp128Protected = """
            8040f17b 8041f8d3 5501a0b2 f24de3a3
            fb34de6c acba861c 9d7e4bca be633bd5
            0d294e6f 42a5f47a 51c7d19b 36de3adf
            8833899d 7f27beb1 6a9152cf 765ee439
            0cce
            """
        static let srtp128Ciphertext = """
            f24de3a3 fb34de6c acba861c 9d7e4bca
            be633bd5 0d294e6f 42a5f47a 51c7d19b
            36de3adf 8833
            """
        static let srtp128Tag = "899d7f27 beb16a91 52cf765e e4390cce"

        /// RFC 7714 Section 16.1.3, AEAD_AES_128_GCM SRTP authentication-only
        /// tagging: the whole plaintext packet is the AAD, the GCM plaintext is
        /// empty, output = packet || tag. Same IV.
        static let srtp128TagOnlyProtected = """
            8040f17b 8041f8d3 5501a0b2 47616c6c
            69612065 7374206f 6d6e6973 20646976
            69736120 696e2070 61727465 73207472
            65732249 3f82d2bc e397e9d7 9e3b19aa
            4216
            """
        static let srtp128TagOnlyTag = "22493f82 d2bce397 e9d79e3b 19aa4216"

        /// RFC 7714 Section 16.2.1, AEAD_AES_256_GCM SRTP encryption:
        /// header || ciphertext (38) || tag (16).
        static let srtp256Protected = """
            8040f17b 8041f8d3 5501a0b2 32b1de78
            a822fe12 ef9f78fa 332e33aa b1801238
            9a58e2f3 b50b2a02 76ffae0f 1ba63799
            b87b7aa3 db36dfff d6b0f9bb 7878d7a7
            6c13
            """
        static let srtp256Ciphertext = """
            32b1de78 a822fe12 ef9f78fa 332e33aa
            b1801238 9a58e2f3 b50b2a02 76ffae0f
            1ba63799 b87b
            """
        static let srtp256Tag = "7aa3db36 dfffd6b0 f9bb7878 d7a76c13"

        /// RFC 7714 Section 16.2.3, AEAD_AES_256_GCM SRTP authentication-only
        /// tagging (whole packet as AAD, empty plaintext): packet || tag.
        static let srtp256TagOnlyProtected = """
            8040f17b 8041f8d3 5501a0b2 47616c6c
            69612065 7374206f 6d6e6973 20646976
            69736120 696e2070 61727465 73207472
            6573a866 d5910f88 7463067c eefec452
            15d4
            """
        static let srtp256TagOnlyTag = "a866d591 0f887463 067ceefe c45215d4"

        // MARK: RFC 7714 Section 17 (SRTCP, AEAD AES-GCM)

        // RFC 7714 Section 17, "Test Vectors for SRTCP". Same key128/key256/salt.
        //
        // Wire layout for AEAD SRTCP (note: differs from AES-CM/HMAC SRTCP, where
        // the auth tag comes *after* E||index):
        //   header (8) || ciphertext || tag (16) || E-flag+SRTCP index (4)
        // IV = (0x0000 || SSRC || 0x0000 || 0 || 31-bit index) XOR salt.
        // Encrypted (E=1): AAD = header (8) || (0x80000000 | index); GCM
        //   plaintext = everything after the 8-octet header.
        // Tag-only (E=0): AAD = whole plaintext packet || index (E bit clear);
        //   GCM plaintext empty; output = packet || tag || index.

        static let rtcpSSRC: UInt32 = 0x4d61_7273
        static let srtcpIndex: UInt32 = 0x0000_05d4
        /// The plaintext RTCP packet, 52 octets (an SR header as given in the RFC).
        static let rtcpPacket = """
            81c8000d 4d617273 4e545031 4e545032
            52545020 0000042a 0000e930 4c756e61
            deadbeef deadbeef deadbeef deadbeef
            deadbeef
            """
        /// First 8 octets of the RTCP packet (header + sender SSRC).
        static let rtcpHeader = "81c8000d 4d617273"
        /// 0x0000 || SSRC || 0x0000 || index, before XOR with the salt.
        static let rtcpIVInput = "0000 4d617273 0000 000005d4"
        static let rtcpIV = "517524055203726f207170bb"
        /// E=1 || index (the last 4 octets of an encrypted SRTCP packet).
        static let srtcpEIndexEncrypted = "800005d4"
        /// E=0 || index (the last 4 octets of a tag-only SRTCP packet).
        static let srtcpEIndexTagOnly = "000005d4"
        /// AAD for the encrypted (E=1) case: header || E||index.
        static let srtcpAADEncrypted = "81c8000d 4d617273 800005d4"

        /// RFC 7714 Section 17.1, SRTCP AEAD_AES_128_GCM encryption and tagging:
        /// header || ciphertext (44) || tag (16) || 800005d4.
        static let srtcp128Protected = """
            81c8000d 4d617273 63e94885 dcdab67c
            a727d766 2f6b7e99 7ff5c0f7 6c06f32d
            c676a5f1 730d6fda 4ce09b46 86303ded
            0bb9275b c84aa458 96cf4d2f c5abf872
            45d9eade 800005d4
            """
        static let srtcp128Tag = "c84aa458 96cf4d2f c5abf872 45d9eade"

        /// RFC 7714 Section 17.2, SRTCP AEAD_AES_256_GCM verification and
        /// decryption: header || ciphertext (44) || tag (16) || 800005d4.
        static let srtcp256Protected = """
            81c8000d 4d617273 d50ae4d1 f5ce5d30
            4ba297e4 7d470c28 2c3ece5d bffe0a50
            a2eaa5c1 110555be 8415f658 c61de047
            6f1b6fad 1d1eb30c 4446839f 57ff6f6c
            b26ac3be 800005d4
            """
        static let srtcp256Tag = "1d1eb30c 4446839f 57ff6f6c b26ac3be"

        /// RFC 7714 Section 17.3, SRTCP AEAD_AES_128_GCM tagging only (E=0):
        /// packet || tag (16) || 000005d4.
        static let srtcp128TagOnlyProtected = """
            81c8000d 4d617273 4e545031 4e545032
            52545020 0000042a 0000e930 4c756e61
            deadbeef deadbeef deadbeef deadbeef
            deadbeef 841dd968 3dd78ec9 2ae58790
            125f62b3 000005d4
            """
        static let srtcp128TagOnlyTag = "841dd968 3dd78ec9 2ae58790 125f62b3"

        /// RFC 7714 Section 17.4, SRTCP AEAD_AES_256_GCM tag verification (E=0):
        /// packet || tag (16) || 000005d4.
        static let srtcp256TagOnlyProtected = """
            81c8000d 4d617273 4e545031 4e545032
            52545020 0000042a 0000e930 4c756e61
            deadbeef deadbeef deadbeef deadbeef
            deadbeef 91db4afb feee5a97 8fab4393
            ed2615fe 000005d4
            """
        static let srtcp256TagOnlyTag = "91db4afb feee5a97 8fab4393 ed2615fe"
    }

    // MARK: - libsrtp full-packet vectors (master key + KDF + protect)

    /// libsrtp test/srtp_driver.c, `srtp_validate()` (cisco/libsrtp, main branch):
    /// AES_CM_128_HMAC_SHA1_80 for both SRTP and SRTCP (libsrtp's default policy,
    /// 20-octet auth key, 10-octet tag), full KDF from master key/salt.
    /// Master key/salt are the RFC 3711 B.3 ones. Not an RFC vector.
    enum LibSRTPAESCM128HMACSHA180 {
        static let masterKey = "e1f97a0d3e018be0d64fa32c06de4139"
        static let masterSalt = "0ec675ad498afeebb6960b3aabe6"
        /// SSRC 0xcafebabe, SEQ 0x1234, ROC 0 (first packet of the stream).
        static let ssrc: UInt32 = 0xcafe_babe
        static let rtpSequenceNumber: UInt16 = 0x1234
        /// Plaintext RTP: 12-octet header + 16 octets of 0xab.
        static let rtpPacket = """
            800f1234 decafbad cafebabe abababab
            abababab abababab abababab
            """
        /// header || AES-CM ciphertext (16) || HMAC-SHA1-80 tag (10).
        static let srtpProtected = """
            800f1234 decafbad cafebabe 4e55dc4c
            e79978d8 8ca4d215 949d2402 b78d6acc
            99ea179b 8dbb
            """
        /// Plaintext RTCP: 8-octet header (SSRC 0xcafebabe) + 16 octets of 0xab.
        static let rtcpPacket = """
            81c8000b cafebabe abababab abababab
            abababab abababab
            """
        /// SRTCP index of this first packet (libsrtp starts at 1).
        static let srtcpIndex: UInt32 = 1
        /// header || ciphertext (16) || E=1+index (80000001) || HMAC-SHA1-80 tag (10).
        static let srtcpProtected = """
            81c8000b cafebabe 7128035b e487b9bd
            bef89041 f977a5a8 80000001 993e08cd
            54d6c123 0798
            """
    }

    /// libsrtp test/srtp_driver.c, `srtp_validate_aes_256()`:
    /// AES_256_CM_HMAC_SHA1_80 (RFC 6188), full KDF. Master key/salt are the
    /// RFC 6188 Section 7.2 ones. Same RTP packet as `LibSRTPAESCM128HMACSHA180`.
    /// Not an RFC vector. (libsrtp gives no reference SRTCP packet here.)
    enum LibSRTPAESCM256HMACSHA180 {
        static let masterKey = """
            f0f04914b513f2763a1b1fa130f10e29
            98f6f6e43e4309d1e622a0e332b9f1b6
            """
        static let masterSalt = "3b04803de51ee7c96423ab5b78d2"
        static let ssrc: UInt32 = 0xcafe_babe
        static let rtpSequenceNumber: UInt16 = 0x1234
        static let rtpPacket = """
            800f1234 decafbad cafebabe abababab
            abababab abababab abababab
            """
        /// header || AES-256-CM ciphertext (16) || HMAC-SHA1-80 tag (10).
        static let srtpProtected = """
            800f1234 decafbad cafebabe f1d9de17
            ff251ff1 aa007774 b0b4b40d a08d9d9a
            5b3a55d8 873b
            """
    }

    /// libsrtp test/srtp_driver.c, `srtp_validate_gcm()`:
    /// AEAD_AES_128_GCM (16-octet tag) for SRTP and SRTCP, *with* the KDF:
    /// 16-octet master key and 12-octet master salt (libsrtp `test_key_gcm`).
    /// libsrtp runs the AES-CM PRF with the 12-octet salt placed in the top
    /// bytes of the 14-octet salt field (i.e. zero-padded on the right to 14)
    /// and takes a 12-octet session salt (label 0x02). Not an RFC vector.
    enum LibSRTPAEADAES128GCM {
        static let masterKey = "000102030405060708090a0b0c0d0e0f"
        static let masterSalt = "a0a1a2a3a4a5a6a7a8a9aaab"
        static let ssrc: UInt32 = 0xcafe_babe
        static let rtpSequenceNumber: UInt16 = 0x1234
        static let rtpPacket = """
            800f1234 decafbad cafebabe abababab
            abababab abababab abababab
            """
        /// header || ciphertext (16) || GCM tag (16).
        static let srtpProtected = """
            800f1234 decafbad cafebabe c5002ede
            04cfdd2e b91159e0 880aa06e d2976826
            f796b201 df3131a1 27e8a392
            """
        static let rtcpPacket = """
            81c8000b cafebabe abababab abababab
            abababab abababab
            """
        static let srtcpIndex: UInt32 = 1
        /// header || ciphertext (16) || GCM tag (16) || E=1+index (80000001).
        static let srtcpProtected = """
            81c8000b cafebabe c98b8b5d f0392a55
            852b6c21 ac8e7025 c52c6fbe a2b3b446
            ea31123b a88ce61e 80000001
            """
    }
}
