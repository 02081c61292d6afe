package io.deltalog.cluster;

import java.util.Arrays;

import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.api.java.UDF2;

/** A value's rank among sorted cut points: Bucketizer's bucket over [-inf, cuts..., +inf]. */
public final class Rank implements UDF1<Double, Integer> {
  private static final long serialVersionUID = 1L;
  private final double[] cuts;

  /** {@code cuts}: strictly increasing finite doubles, packed big-endian. */
  public Rank(byte[] cuts) {
    this.cuts = RangeId.unpack(cuts);
  }

  @Override
  public Integer call(Double value) {
    return RangeId.rank(cuts, value == null ? Double.NEGATIVE_INFINITY : value);
  }

  /** {@link RangeId.WithArgs}' counterpart: the cut points come first, as a literal. */
  public static final class WithArgs implements UDF2<byte[], Double, Integer> {
    private static final long serialVersionUID = 1L;
    private transient byte[] cuts;
    private transient Rank function;

    @Override
    public Integer call(byte[] cuts, Double value) {
      if (function == null || (cuts != this.cuts && !Arrays.equals(cuts, this.cuts))) {
        function = new Rank(cuts);
        this.cuts = cuts;
      }
      return function.call(value);
    }
  }
}
