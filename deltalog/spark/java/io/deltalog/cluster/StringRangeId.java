package io.deltalog.cluster;

import java.util.Arrays;

import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.api.java.UDF4;

/**
 * A string's range id from its UTF-8 bytes: the order key of zorder.order_key (the big-endian number
 * of the first six bytes after a common prefix; -1 below the prefix, 2^48 above it) ranked like
 * {@link RangeId}. One pass over the bytes, where the portable spelling takes a substring by
 * characters, hex-encodes it, converts base 16 to a decimal string and parses that.
 */
public final class StringRangeId implements UDF1<byte[], Integer> {
  private static final long serialVersionUID = 1L;
  static final int KEY_BYTES = 6;
  private final byte[] prefix;
  private final double[] cuts;
  private final int bits;

  public StringRangeId(byte[] prefix, byte[] cuts, int bits) {
    this.prefix = prefix.clone();
    this.cuts = RangeId.unpack(cuts);
    this.bits = bits;
  }

  @Override
  public Integer call(byte[] value) {
    return RangeId.spread(RangeId.rank(cuts, key(value)), cuts.length + 1, bits);
  }

  double key(byte[] value) {
    if (value == null) return Double.NEGATIVE_INFINITY;
    int p = prefix.length;
    if (value.length < p || Arrays.compareUnsigned(value, 0, p, prefix, 0, p) != 0) {
      return Arrays.compareUnsigned(value, prefix) < 0 ? -1.0 : (double) (1L << (8 * KEY_BYTES));
    }
    long key = 0;
    for (int i = 0; i < KEY_BYTES; i++) {
      int at = p + i;
      key = (key << 8) | (at < value.length ? value[at] & 0xff : 0);
    }
    return (double) key;
  }

  /** {@link RangeId.WithArgs}' counterpart: the prefix, cut points and bits come first, as literals. */
  public static final class WithArgs implements UDF4<byte[], byte[], Integer, byte[], Integer> {
    private static final long serialVersionUID = 1L;
    private transient byte[] prefix;
    private transient byte[] cuts;
    private transient int bits;
    private transient StringRangeId function;

    @Override
    public Integer call(byte[] prefix, byte[] cuts, Integer bits, byte[] value) {
      if (function == null || bits != this.bits || (prefix != this.prefix && !Arrays.equals(prefix, this.prefix))
          || (cuts != this.cuts && !Arrays.equals(cuts, this.cuts))) {
        function = new StringRangeId(prefix, cuts, bits);
        this.prefix = prefix;
        this.cuts = cuts;
        this.bits = bits;
      }
      return function.call(value);
    }
  }
}
