"""CRC-32C check values, and that every buffer kind gives the same CRC."""

import mmap

from seglog.records import crc32c


def test_crc32c_of_the_standard_check_string():
    assert crc32c(b"123456789") == 0xE3069283


def test_crc32c_of_kafkas_test_string():
    # Kafka's Crc32CTest.testValue
    assert crc32c(b"Some String") == 608512271


def test_crc32c_of_nothing_is_zero():
    assert crc32c(b"") == 0


def test_crc32c_continues_from_a_previous_value():
    assert crc32c(b"56789", crc32c(b"1234")) == crc32c(b"123456789")


def test_crc32c_reads_bytearray_memoryview_and_mmap_alike():
    data = b"Some String"
    with mmap.mmap(-1, len(data)) as mapped:
        mapped[:] = data
        assert crc32c(mapped) == 608512271
    assert crc32c(bytearray(data)) == crc32c(memoryview(b"xx" + data)[2:]) == 608512271
