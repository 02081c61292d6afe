package io.deltalog.cluster;

import org.apache.spark.sql.api.java.UDF1;

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
}
