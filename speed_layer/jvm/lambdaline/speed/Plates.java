package lambdaline.speed;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Per plate: its entries' best matches ({@link OperatorConfig.Match}: a trip's exit, a
 * registration) and its sessions ({@link Sessions}).
 *
 * <p>State, each an entry or an event of its own, so an event reads and writes what it touches
 * and not the whole plate:
 *
 * <ul>
 *   <li>{@code plate_entries}: the plate's entries by event id, each with its best so far per
 *       match, held until the watermark W passes entry + the longest interval's end;
 *   <li>{@code plate_rights_<i>}: per match, the events an entry still to come (after W) can
 *       match: an exit until W passes it, a registration until it can no longer apply (400
 *       days), and of those at or before W + the interval's end only the best where the
 *       greatest wins (it outranks the others for any later entry): a few per plate, one
 *       value. (A list state would keep a count of its elements beside them, a read and a
 *       write more per append.)
 * </ul>
 *
 * <p>Timers, each registered when its deadline is made and not moved: an entry's at entry + the
 * longest interval's end (it leaves, and a match with nothing by then is written as missing),
 * and, for a match with a shorter interval and nothing at the entry's arrival, one at its end.
 * A match's events that W makes useless within an entry's life (exits) are swept by the
 * plate's entry timers, and get a timer of their own only where no entry of the plate outlives
 * them; events useful for longer (registrations) get one each, at the end of their use, when
 * they are kept. (Spark's state TTL, which would collect them instead, is processing time only:
 * refused in an event-time operator.)
 *
 * <p>A match of an entry is final once W passes entry + its interval's end: an event arriving
 * after that changes nothing (an entry arriving with W already past is matched once, at once).
 */
final class Plates {
  static final StructType RIGHTS =
      new StructType().add("held", DataTypes.createArrayType(Right.SCHEMA, false));

  static final StructType LEFT =
      new StructType()
          .add("time", DataTypes.LongType, false)
          .add("strings", DataTypes.createArrayType(DataTypes.StringType, true))
          .add("bests", DataTypes.createArrayType(Right.SCHEMA, true))
          .add("written", DataTypes.createArrayType(DataTypes.BooleanType, false))
          .add("missing", DataTypes.createArrayType(DataTypes.BooleanType, false));

  private final OperatorConfig.Plates config;
  private final OperatorConfig.Slots slots;
  private final Output output;
  private final List<OperatorConfig.Match> matches;
  private final List<Comparator<Right>> orders = new ArrayList<>();
  private final long longestMs;
  private final StatefulProcessorHandle handle;
  private final MapState<String, Row> entries;
  private final List<ValueState<Row>> rights = new ArrayList<>();
  private final Sessions sessions;
  private Input.Columns columns;

  Plates(OperatorConfig config, Output output, StatefulProcessorHandle handle) {
    this.config = config.plates;
    this.slots = config.input;
    this.output = output;
    this.matches = config.plates.matches();
    this.handle = handle;
    long longest = Long.MIN_VALUE;
    for (int i = 0; i < matches.size(); i++) {
      OperatorConfig.Match match = matches.get(i);
      orders.add(Right.order(match.order()));
      longest = Math.max(longest, match.toMs());
      rights.add(handle.getValueState("plate_rights_" + i, Encoders.row(RIGHTS), TTLConfig.NONE()));
    }
    this.longestMs = matches.isEmpty() ? 0 : longest;
    this.entries =
        handle.getMapState(
            "plate_entries", Encoders.STRING(), Encoders.row(LEFT), TTLConfig.NONE());
    OperatorConfig.Sessions sessions = config.plates.sessions();
    this.sessions = sessions == null ? null : new Sessions(sessions, output, handle);
  }

  /** An entry held for its matches. */
  static final class Left {
    final long time;
    final List<String> strings;
    final Right[] bests;
    /** Per match: a candidate was written. */
    final boolean[] written;
    /** Per match: written as missing (nothing by its deadline). */
    final boolean[] missing;
    boolean changed;

    Left(long time, List<String> strings, int matches) {
      this.time = time;
      this.strings = strings;
      this.bests = new Right[matches];
      this.written = new boolean[matches];
      this.missing = new boolean[matches];
    }

    static Left of(Row row, int matches) {
      Left left = new Left(row.getLong(0), row.getList(1), matches);
      List<Row> bests = row.getList(2);
      List<Boolean> written = row.getList(3);
      List<Boolean> missing = row.getList(4);
      for (int i = 0; i < matches && i < bests.size(); i++) {
        left.bests[i] = Right.of(bests.get(i));
        left.written[i] = written.get(i);
        left.missing[i] = missing.get(i);
      }
      return left;
    }

    Row toRow() {
      List<Row> bestRows = new ArrayList<>(bests.length);
      List<Boolean> writtenList = new ArrayList<>(written.length);
      List<Boolean> missingList = new ArrayList<>(missing.length);
      for (int i = 0; i < bests.length; i++) {
        bestRows.add(bests[i] == null ? null : bests[i].toRow());
        writtenList.add(written[i]);
        missingList.add(missing[i]);
      }
      return RowFactory.create(
          time, CollectionConverters.asScala(strings).toSeq(),
          CollectionConverters.asScala(bestRows).toSeq(),
          CollectionConverters.asScala(writtenList).toSeq(),
          CollectionConverters.asScala(missingList).toSeq());
    }

    /**
     * Writes, once, each match of this entry that found nothing by a deadline the
     * watermark has passed; true if it wrote any.
     */
    boolean missed(
        String plate, String id, List<OperatorConfig.Match> matches, long watermark,
        Output output, List<Row> out) {
      boolean any = false;
      for (int i = 0; i < matches.size(); i++) {
        OperatorConfig.Match match = matches.get(i);
        if (bests[i] == null && !missing[i] && watermark >= time + match.toMs()) {
          missing[i] = true;
          any = true;
          if (match.missing() != null) {
            out.add(
                output.row(match.missing(), leftStrings(plate, id), List.of(time), List.of(),
                    List.of(), null));
          }
        }
      }
      return any;
    }

    /** A row's strings from the left event: its plate, its strings, its id. */
    List<String> leftStrings(String plate, String id) {
      List<String> all = new ArrayList<>(strings.size() + 2);
      all.add(plate);
      all.addAll(strings);
      all.add(id);
      return all;
    }
  }

  void onRows(String plate, Iterator<Row> rows, TimerValues timers, List<Row> out) {
    long watermark = timers.getCurrentWatermarkInMs();
    long version = timers.getCurrentProcessingTimeInMs();
    List<String> newIds = new ArrayList<>();
    List<Left> newLefts = new ArrayList<>();
    List<Row> sessionEntries = new ArrayList<>();
    List<List<Right>> newRights = new ArrayList<>();
    for (int i = 0; i < matches.size(); i++) {
      newRights.add(new ArrayList<>());
    }
    Set<String> seen = new HashSet<>();
    while (rows.hasNext()) {
      Row row = rows.next();
      columns = Input.Columns.of(columns, row, slots);
      String kind = row.getString(columns.kind);
      boolean used = false;
      if (config.left().equals(kind)) {
        used = true;
        String id = row.getString(columns.id);
        if (!seen.add(id) || entries.containsKey(id)) {
          continue; // a copy of a left event held
        }
        List<String> strings = new ArrayList<>(config.leftStrings().length);
        for (int slot : config.leftStrings()) {
          strings.add(columns.string(row, slot));
        }
        newIds.add(id);
        newLefts.add(new Left(row.getLong(columns.time), strings, matches.size()));
        sessionEntries.add(row);
      }
      for (int i = 0; i < matches.size(); i++) {
        if (matches.get(i).right().equals(kind)) {
          newRights.get(i).add(Right.of(row, columns, matches.get(i)));
          used = true;
        }
      }
      if (!used) {
        throw new IllegalArgumentException("a plate row of a kind no part reads: " + kind);
      }
    }

    // new match events against the entries held
    boolean anyNewRights = newRights.stream().anyMatch(list -> !list.isEmpty());
    long lastLeaves = Long.MIN_VALUE; // when the last entry of the plate held leaves
    for (Left left : newLefts) {
      lastLeaves = Math.max(lastLeaves, left.time + longestMs);
    }
    if (anyNewRights) {
      for (scala.Tuple2<String, Row> pair : held()) {
        Left left = Left.of(pair._2(), matches.size());
        lastLeaves = Math.max(lastLeaves, left.time + longestMs);
        for (int i = 0; i < matches.size(); i++) {
          if (watermark >= left.time + matches.get(i).toMs()) {
            continue; // final
          }
          offer(plate, pair._1(), left, i, newRights.get(i), List.of(), version, out);
        }
        if (left.changed) {
          entries.updateValue(pair._1(), left.toRow());
        }
      }
    }

    // new entries against every match event the plate holds, and the new ones
    List<List<Right>> stored = new ArrayList<>();
    for (int i = 0; i < matches.size(); i++) {
      boolean needed = !newLefts.isEmpty() || !newRights.get(i).isEmpty();
      stored.add(needed ? read(rights.get(i)) : List.of());
    }
    for (int n = 0; n < newLefts.size(); n++) {
      Left left = newLefts.get(n);
      String id = newIds.get(n);
      for (int i = 0; i < matches.size(); i++) {
        offer(plate, id, left, i, stored.get(i), newRights.get(i), version, out);
        long due = left.time + matches.get(i).toMs();
        if (left.bests[i] == null && watermark < due && due < left.time + longestMs) {
          handle.registerTimer(due);
        }
      }
      left.missed(plate, id, matches, watermark, output, out);
      if (watermark < left.time + longestMs) {
        entries.updateValue(id, left.toRow());
        handle.registerTimer(left.time + longestMs);
      }
    }

    // the new match events an entry still to come can use
    for (int i = 0; i < matches.size(); i++) {
      List<Right> arrived = newRights.get(i);
      if (arrived.isEmpty()) {
        continue;
      }
      OperatorConfig.Match match = matches.get(i);
      List<Right> useful = new ArrayList<>();
      for (Right right : arrived) {
        if (uselessAt(right, match) > watermark) {
          useful.add(right);
        }
      }
      List<Right> all = new ArrayList<>(stored.get(i));
      all.addAll(useful);
      List<Right> kept = kept(all, i, watermark);
      if (!kept.equals(stored.get(i))) {
        write(rights.get(i), kept);
      }
      List<Right> added = new ArrayList<>(kept);
      added.removeAll(stored.get(i));
      for (Right right : added) {
        long end = uselessAt(right, match);
        // swept by an entry's timer if one of the plate's outlives it, else by its own
        if (!sweptWithEntries(match) || end > lastLeaves) {
          handle.registerTimer(end);
        }
      }
    }

    if (sessions != null && !sessionEntries.isEmpty()) {
      sessions.onEntries(plate, sessionEntries, columns, watermark, version, out);
    }
  }

  void onTimer(String plate, long firedMs, TimerValues timers, List<Row> out) {
    long watermark = timers.getCurrentWatermarkInMs();
    long version = timers.getCurrentProcessingTimeInMs();
    boolean entriesLeft = false;
    boolean entryTimer = false; // the timer is an entry's deadline
    List<String> gone = new ArrayList<>();
    for (scala.Tuple2<String, Row> pair : held()) {
      Left left = Left.of(pair._2(), matches.size());
      for (OperatorConfig.Match match : matches) {
        entryTimer |= left.time + match.toMs() == firedMs;
      }
      boolean missed = left.missed(plate, pair._1(), matches, watermark, output, out);
      if (watermark >= left.time + longestMs) {
        gone.add(pair._1());
      } else {
        entriesLeft = true;
        if (missed) {
          entries.updateValue(pair._1(), left.toRow());
        }
      }
    }
    for (String id : gone) {
      entries.removeKey(id);
    }
    // sweep what no entry still to come can use: the events an entry's timer sweeps on
    // each, the others (useful longer than an entry lives) only on a timer of their own
    for (int i = 0; i < matches.size(); i++) {
      OperatorConfig.Match match = matches.get(i);
      if (!sweptWithEntries(match) && entryTimer) {
        continue;
      }
      List<Right> held = read(rights.get(i));
      if (held.isEmpty()) {
        continue;
      }
      List<Right> kept = kept(held, i, watermark);
      if (kept.size() != held.size()) {
        write(rights.get(i), kept);
      }
      if (sweptWithEntries(match) && !entriesLeft) {
        long at = Long.MAX_VALUE;
        for (Right right : kept) {
          at = Math.min(at, uselessAt(right, match));
        }
        if (at != Long.MAX_VALUE && at != firedMs) {
          handle.registerTimer(at);
        }
      }
    }
    if (sessions != null) {
      sessions.onTimer(plate, firedMs, watermark, version, out);
    }
  }

  /**
   * Of the events offered (two lists, read in turn), the best that matches {@code left} in
   * match {@code i}; if it is better than the entry's best so far, it becomes the best and is
   * written as a candidate, unless its view hides it and none was written before. So a
   * micro-batch writes at most one candidate per entry and match, whatever order its events
   * came in.
   */
  private void offer(
      String plate, String id, Left left, int i, List<Right> some, List<Right> more,
      long version, List<Row> out) {
    OperatorConfig.Match match = matches.get(i);
    Comparator<Right> order = orders.get(i);
    Right best = left.bests[i];
    Right found = null;
    for (List<Right> offered : List.of(some, more)) {
      for (Right right : offered) {
        if (!equalKeys(match, left, right) || (selfMatch(match) && right.id().equals(id))) {
          continue; // not its keys, or the left event itself
        }
        if (right.time() < left.time + match.fromMs()
            || right.time() > left.time + match.toMs()) {
          continue;
        }
        Right against = found != null ? found : best;
        if (against != null) {
          int compared = order.compare(right, against);
          if (match.latest() ? compared <= 0 : compared >= 0) {
            continue; // not better (a copy is not either)
          }
        }
        found = right;
      }
    }
    if (found == null) {
      return;
    }
    left.bests[i] = found;
    left.changed = true;
    if (found.flag(match.shownIf()) || left.written[i]) {
      left.written[i] = true;
      List<String> strings = left.leftStrings(plate, id);
      strings.addAll(found.strings());
      out.add(
          output.row(
              match.view(), strings, List.of(left.time, found.time()), found.flags(), List.of(),
              version));
    }
  }

  private static boolean equalKeys(OperatorConfig.Match match, Left left, Right right) {
    for (int[] pair : match.equal()) {
      String a = left.strings.get(pair[0]);
      if (a == null || !a.equals(right.strings().get(pair[1]))) {
        return false;
      }
    }
    return true;
  }

  private boolean selfMatch(OperatorConfig.Match match) {
    return match.right().equals(config.left());
  }

  /**
   * The events of match {@code i} an entry after the watermark can still use: those it can
   * still be in the interval of and, where the greatest wins, of those at or before W + the
   * interval's end only the best (it applies wherever they do, and outranks them).
   */
  private List<Right> kept(List<Right> held, int i, long watermark) {
    OperatorConfig.Match match = matches.get(i);
    Comparator<Right> order = orders.get(i);
    Right base = null;
    List<Right> kept = new ArrayList<>();
    for (Right right : held) {
      if (uselessAt(right, match) <= watermark) {
        continue;
      }
      if (match.latest() && right.time() <= watermark + match.toMs()) {
        if (base == null || order.compare(right, base) > 0) {
          base = right;
        }
      } else if (!kept.contains(right)) {
        kept.add(right);
      }
    }
    if (base != null) {
      kept.add(0, base);
    }
    return kept;
  }

  /** The plate's entries held, read whole before any is written. */
  private List<scala.Tuple2<String, Row>> held() {
    List<scala.Tuple2<String, Row>> held = new ArrayList<>();
    for (scala.collection.Iterator<scala.Tuple2<String, Row>> it = entries.iterator();
        it.hasNext(); ) {
      held.add(it.next());
    }
    return held;
  }

  /** When W has passed the last entry {@code right} could match: it is of no use after. */
  private static long uselessAt(Right right, OperatorConfig.Match match) {
    return right.time() - match.fromMs();
  }

  /** Whether a match's events are of no use by the time the entries they match leave. */
  private boolean sweptWithEntries(OperatorConfig.Match match) {
    return -match.fromMs() <= longestMs;
  }

  private static List<Right> read(ValueState<Row> state) {
    Row row = state.get();
    List<Right> held = new ArrayList<>();
    if (row != null) {
      for (Row right : row.<Row>getList(0)) {
        held.add(Right.of(right));
      }
    }
    return held;
  }

  private static void write(ValueState<Row> state, List<Right> kept) {
    if (kept.isEmpty()) {
      state.clear();
    } else {
      List<Row> rows = new ArrayList<>(kept.size());
      for (Right right : kept) {
        rows.add(right.toRow());
      }
      state.update(RowFactory.create(CollectionConverters.asScala(rows).toSeq()));
    }
  }
}
