package io.deltalog.cluster;

import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.api.java.UDF4;

/**
 * A row's position on the Z-order or Hilbert curve from its range ids, packed into one long
 * ({@code n} ids of {@code bits} bits, the first column in the highest bits; n * bits <= 62).
 *
 * The same number as zorder.py's portable spelling (Skilling's transform as one projection per step,
 * then the bits interleaved MSB first, round-robin), which generates a large method per query that
 * the JIT compiles anew for every query; this class is compiled once per JVM.
 */
public final class CurveKey implements UDF1<Long, Long> {
  private static final long serialVersionUID = 1L;
  private final boolean hilbert;
  private final int n;
  private final int bits;

  public CurveKey(boolean hilbert, int n, int bits) {
    if (n < 1 || bits < 1 || n * bits > 62) {
      throw new IllegalArgumentException("n * bits must be within 1..62, got " + n + " * " + bits);
    }
    this.hilbert = hilbert;
    this.n = n;
    this.bits = bits;
  }

  @Override
  public Long call(Long packed) {
    long[] x = new long[n];
    long mask = (1L << bits) - 1;
    for (int i = 0; i < n; i++) {
      x[i] = (packed >>> (bits * (n - 1 - i))) & mask;
    }
    if (hilbert && n > 1) {
      transpose(x, bits);
    }
    return interleave(x, bits);
  }

  /** Skilling's AxestoTranspose (2004): afterwards the Hilbert index is the interleaving of x. */
  static void transpose(long[] x, int bits) {
    int n = x.length;
    long m = 1L << (bits - 1);
    for (long q = m; q > 1; q >>= 1) {
      long p = q - 1;
      if ((x[0] & q) != 0) x[0] ^= p;
      for (int i = 1; i < n; i++) {
        if ((x[i] & q) != 0) {
          x[0] ^= p;
        } else {
          long t = (x[0] ^ x[i]) & p;
          x[0] ^= t;
          x[i] ^= t;
        }
      }
    }
    for (int i = 1; i < n; i++) x[i] ^= x[i - 1];  // Gray encode
    long t = 0;
    for (long q = m; q > 1; q >>= 1) {
      if ((x[n - 1] & q) != 0) t ^= q - 1;
    }
    for (int i = 0; i < n; i++) x[i] ^= t;
  }

  static long interleave(long[] x, int bits) {
    int total = bits * x.length;
    long acc = 0;
    int pos = 0;
    for (int b = bits - 1; b >= 0; b--) {
      for (long v : x) {
        acc |= ((v >>> b) & 1) << (total - 1 - pos);
        pos++;
      }
    }
    return acc;
  }

  /** {@link RangeId.WithArgs}' counterpart: the curve, n and bits come first, as literals. */
  public static final class WithArgs implements UDF4<Boolean, Integer, Integer, Long, Long> {
    private static final long serialVersionUID = 1L;
    private transient CurveKey function;

    @Override
    public Long call(Boolean hilbert, Integer n, Integer bits, Long packed) {
      if (function == null || function.hilbert != hilbert || function.n != n || function.bits != bits) {
        function = new CurveKey(hilbert, n, bits);
      }
      return function.call(packed);
    }
  }
}
