package lambdaline.speed;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The roll-up views of one group (the key they all share), in one state: per family (views
 * grouped by the same further keys, {@link OperatorConfig.Family}) and per value of those keys,
 * the family's measures in buckets of {@code bucketMs} aligned to the epoch; each window's row
 * its buckets combined. A micro-batch writes the row of every window its events changed, with a
 * version past the group's last.
 *
 * <p>Rows written: strings {@code [group, the family's key values...]}, numbers {@code [window
 * start, window end, the view's measures...]}.
 *
 * <p>An event at or before the previous micro-batch's watermark never comes: Spark drops it as
 * late (counted). Every later one is taken: no window final under that watermark holds it, and
 * every bucket of a window holding it is still kept. A copy of an event taken (its id seen) is
 * not taken again: the group keeps the ids of the events after the watermark W. A bucket is
 * kept until W passes the end of the latest window holding it. One event-time timer per group at a time, registered at
 * the next moment something can be dropped and registered again when it fires.
 */
final class RollUp {
  private static final StructType BUCKET =
      new StructType()
          .add("family", DataTypes.IntegerType, false)
          .add("group", DataTypes.createArrayType(DataTypes.StringType, true), false)
          .add("start", DataTypes.LongType, false)
          .add("values", DataTypes.createArrayType(DataTypes.LongType, false), false);

  static final StructType STATE =
      new StructType()
          .add("buckets", DataTypes.createArrayType(BUCKET, false))
          .add("version", DataTypes.LongType, false)
          .add("timer_ms", DataTypes.LongType);

  private final OperatorConfig.RollUpConfig config;
  private final OperatorConfig.Slots slots;
  private final long sweepMs;
  private final StatefulProcessorHandle handle;
  private final ValueState<Row> groups;
  private final MapState<String, Long> seen;
  private final Output output;
  private Input.Columns columns;

  RollUp(OperatorConfig config, Output output, StatefulProcessorHandle handle) {
    this.config = config.rollUp;
    this.slots = config.input;
    this.sweepMs = config.sweepMs;
    this.output = output;
    this.handle = handle;
    this.groups = handle.getValueState("roll_up", Encoders.row(STATE), TTLConfig.NONE());
    this.seen =
        handle.getMapState("roll_up_seen", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE());
  }

  private static long floor(long t, long step) {
    return Math.floorDiv(t, step) * step;
  }

  /** When a family's bucket can no longer change a window: the end of the latest holding it. */
  private long deadline(int family, long bucketStart) {
    long deadline = Long.MIN_VALUE;
    for (OperatorConfig.Window window : config.windows()) {
      if (window.family() == family) {
        deadline = Math.max(deadline, floor(bucketStart, window.slideMs()) + window.sizeMs());
      }
    }
    return deadline;
  }

  void onRows(String group, Iterator<Row> rows, TimerValues timers, List<Row> out) {
    long watermark = timers.getCurrentWatermarkInMs();
    Group held = Group.of(groups.get(), config);
    List<OperatorConfig.Family> families = config.families();
    // per window: the (family key values, start) it changed
    List<TreeSet<Changed>> changed = new ArrayList<>();
    for (int i = 0; i < config.windows().size(); i++) {
      changed.add(new TreeSet<>());
    }
    long leastTaken = Long.MAX_VALUE;
    while (rows.hasNext()) {
      Row row = rows.next();
      columns = Input.Columns.of(columns, row, slots);
      long t = row.getLong(columns.time);
      String id = row.getString(columns.id);
      if (seen.containsKey(id)) {
        continue;
      }
      seen.updateValue(id, t);
      leastTaken = Math.min(leastTaken, t);
      List<List<String>> keys = new ArrayList<>(families.size());
      for (int f = 0; f < families.size(); f++) {
        OperatorConfig.Family family = families.get(f);
        List<String> key = new ArrayList<>(family.keys().length);
        for (int slot : family.keys()) {
          key.add(columns.string(row, slot));
        }
        keys.add(key);
        long[] values = held.bucket(f, key, floor(t, config.bucketMs()), family.measures());
        Measures.add(values, family.measures(), row, columns);
      }
      for (int i = 0; i < config.windows().size(); i++) {
        OperatorConfig.Window window = config.windows().get(i);
        // the windows holding t: starts in (t - size, t], multiples of the slide
        for (long s = floor(t, window.slideMs()); s > t - window.sizeMs(); s -= window.slideMs()) {
          changed.get(i).add(new Changed(keys.get(window.family()), s));
        }
      }
    }
    if (leastTaken == Long.MAX_VALUE) {
      return;
    }
    held.version = Math.max(held.version + 1, timers.getCurrentProcessingTimeInMs());
    for (int i = 0; i < config.windows().size(); i++) {
      OperatorConfig.Window window = config.windows().get(i);
      for (Changed c : changed.get(i)) {
        out.add(held.window(window, families.get(window.family()), group, c, output));
      }
    }
    held.forget(watermark, this);
    if (held.timerMs == null) {
      held.timerMs = next(held, leastTaken);
      handle.registerTimer(held.timerMs);
    }
    groups.update(held.toRow());
  }

  void onTimer(String group, TimerValues timers, List<Row> out) {
    Group held = Group.of(groups.get(), config);
    long watermark = timers.getCurrentWatermarkInMs();
    held.timerMs = null; // a fired timer is gone
    held.forget(watermark, this);
    long leastSeen = Long.MAX_VALUE;
    List<String> gone = new ArrayList<>();
    for (scala.collection.Iterator<scala.Tuple2<String, Long>> ids = seen.iterator();
        ids.hasNext(); ) {
      scala.Tuple2<String, Long> id = ids.next();
      if (id._2() <= watermark) {
        gone.add(id._1());
      } else {
        leastSeen = Math.min(leastSeen, id._2());
      }
    }
    for (String id : gone) {
      seen.removeKey(id);
    }
    if (held.isEmpty() && leastSeen == Long.MAX_VALUE) {
      groups.clear();
      return;
    }
    held.timerMs = next(held, leastSeen);
    handle.registerTimer(held.timerMs);
    groups.update(held.toRow());
  }

  /**
   * The group's next timer: its oldest bucket's deadline, or a sweep of the ids it holds once W
   * can have passed {@code sweepMs} of them, whichever comes first.
   */
  private long next(Group held, long leastSeen) {
    long next = Long.MAX_VALUE;
    for (int f = 0; f < held.families.size(); f++) {
      for (TreeMap<Long, long[]> buckets : held.families.get(f).values()) {
        if (!buckets.isEmpty()) {
          next = Math.min(next, deadline(f, buckets.firstKey()));
        }
      }
    }
    if (leastSeen != Long.MAX_VALUE) {
      next = Math.min(next, leastSeen + sweepMs);
    }
    return next;
  }

  /** A window a micro-batch changed: its family's key values and its start. */
  record Changed(List<String> key, long start) implements Comparable<Changed> {
    @Override
    public int compareTo(Changed other) {
      int byStart = Long.compare(start, other.start);
      return byStart != 0 ? byStart : String.join("\u0000", key).compareTo(
          String.join("\u0000", other.key));
    }
  }

  /** One group's buckets per family and key values, the version of its rows, its timer. */
  static final class Group {
    final List<Map<List<String>, TreeMap<Long, long[]>>> families = new ArrayList<>();
    long version;
    Long timerMs;

    static Group of(Row row, OperatorConfig.RollUpConfig config) {
      Group group = new Group();
      for (int f = 0; f < config.families().size(); f++) {
        group.families.add(new HashMap<>());
      }
      if (row == null) {
        return group;
      }
      for (Row b : row.<Row>getList(0)) {
        List<Long> stored = b.getList(3);
        long[] values = new long[stored.size()];
        for (int i = 0; i < values.length; i++) {
          values[i] = stored.get(i);
        }
        List<String> key = new ArrayList<>(b.<String>getList(1));
        group.families.get(b.getInt(0)).computeIfAbsent(key, k -> new TreeMap<>())
            .put(b.getLong(2), values);
      }
      group.version = row.getLong(1);
      group.timerMs = row.isNullAt(2) ? null : row.getLong(2);
      return group;
    }

    Row toRow() {
      List<Row> rows = new ArrayList<>();
      for (int f = 0; f < families.size(); f++) {
        for (Map.Entry<List<String>, TreeMap<Long, long[]>> byKey : families.get(f).entrySet()) {
          Object key = CollectionConverters.asScala(byKey.getKey()).toSeq();
          for (Map.Entry<Long, long[]> e : byKey.getValue().entrySet()) {
            List<Long> values = new ArrayList<>(e.getValue().length);
            for (long v : e.getValue()) {
              values.add(v);
            }
            rows.add(
                RowFactory.create(f, key, e.getKey(), CollectionConverters.asScala(values).toSeq()));
          }
        }
      }
      return RowFactory.create(CollectionConverters.asScala(rows).toSeq(), version, timerMs);
    }

    boolean isEmpty() {
      for (Map<List<String>, TreeMap<Long, long[]>> family : families) {
        if (!family.isEmpty()) {
          return false;
        }
      }
      return true;
    }

    long[] bucket(int family, List<String> key, long start, List<OperatorConfig.Measure> ms) {
      return families.get(family).computeIfAbsent(key, k -> new TreeMap<>())
          .computeIfAbsent(start, s -> Measures.none(ms));
    }

    /** A window's row: its buckets combined, the view's measures of them. */
    Row window(
        OperatorConfig.Window window, OperatorConfig.Family family, String group, Changed at,
        Output output) {
      long end = at.start() + window.sizeMs();
      long[] values = Measures.none(family.measures());
      TreeMap<Long, long[]> buckets = families.get(window.family()).get(at.key());
      for (long[] bucket : buckets.subMap(at.start(), true, end, false).values()) {
        Measures.addAll(values, family.measures(), bucket);
      }
      List<String> strings = new ArrayList<>(1 + at.key().size());
      strings.add(group);
      strings.addAll(at.key());
      List<Long> longs = new ArrayList<>(2 + window.measures().length);
      longs.add(at.start());
      longs.add(end);
      for (int m : window.measures()) {
        longs.add(Measures.shown(family.measures().get(m), values[m]));
      }
      return output.row(window.view(), strings, longs, List.of(), List.of(), version);
    }

    /** Drops the buckets no event after the watermark can add to a window with. */
    void forget(long watermark, RollUp rollUp) {
      for (int f = 0; f < families.size(); f++) {
        int family = f;
        families.get(f).values().removeIf(buckets -> {
          buckets.entrySet().removeIf(e -> rollUp.deadline(family, e.getKey()) <= watermark);
          return buckets.isEmpty();
        });
      }
    }
  }
}
